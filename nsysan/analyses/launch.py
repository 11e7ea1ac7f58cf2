"""Launch overhead: each GPU operation joined to the CUDA API call that launched it.

The join is on correlation id AND process (correlation ids are unique only within a process).
Per launch: api_ns (the call's CPU duration), queue_ns (API start -> GPU start: launch latency
plus time queued behind earlier work; 0 for an operation that starts before its call), gpu_ns, and
launch_dominated (api_ns > gpu_ns). CUDA Graph launches (``cudaGraphLaunch``/``cuGraphLaunch``) are kept apart: ``is_graph``. Compare ``nsys stats -r
cuda_kern_exec_sum``.

**A graph launch is one launch**, however the graph was traced: one row per launch call that ran on
the GPU (its process and correlation id). Traced whole (``--cuda-graph-trace=graph``) that is the
graph's record; traced at node level (``=node``) every kernel, copy and memset of the replayed graph
is its own GPU record sharing the launch's correlation id: those are the launch's nodes
(``graph_nodes``), kernels of one graph launch, not launches, and the launch's row spans them (first
node's start to last node's end). So 383 ``cudaGraphLaunch`` calls are 383 graph launches at either
level, and a launch call is weighed once against the GPU time it started.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsysan.analyses.frames import category_mask, compact, filled, name_in, sort_rows
from nsysan.analyses.join import with_launch_calls
from nsysan.trace.model import Trace, as_column

GRAPH_CALLS = ("cudaGraphLaunch", "cuGraphLaunch")  # runtime and driver (``_v10000``, ``_ptsz`` ...)
GRAPH_NAME = "[CUDA graph]"  # a graph launch traced at node level (the export does not name its graph)
COLUMNS = ["start_ns", "end_ns", "gpu_ns", "device_id", "stream_id", "pid", "tid", "correlation_id", "name", "op",
           "api_name", "api_start_ns", "api_end_ns", "api_ns", "queue_ns", "launch_dominated", "is_graph",
           "graph_nodes"]


def launches(trace: Trace, ops: pd.DataFrame) -> pd.DataFrame:
    """Kernel launches and graph launches with their launching API call, one row per launch. Columns:
    start_ns, end_ns, gpu_ns, device_id, stream_id, pid, tid, correlation_id, name, op, api_name,
    api_start_ns, api_end_ns, api_ns, queue_ns, launch_dominated, is_graph, graph_nodes. A graph
    launch is one row (op "graph"), at node level spanning its nodes (``graph_nodes``: how many GPU
    operations it ran; 0 for plain kernels and for graphs traced whole). Operations whose API call is
    not in the trace are dropped."""
    ops = with_launch_calls(trace, ops)
    called = ops["api_start_ns"].to_numpy() >= 0
    graph = (name_in(ops["op"], ("graph",))
             | category_mask(ops["api_name"], lambda s: s.startswith(GRAPH_CALLS))) & called
    keep = name_in(ops["op"], ("kernel",)) & called
    if graph.any():
        keep &= ~graph
        j = _with_graph_launches(ops.loc[keep], ops.loc[graph])
        is_graph = name_in(j["op"], ("graph",))
        nodes = j["graph_nodes"]
    else:  # no graph launches (the usual case): the kernels' columns shared, no copy
        j = ops if bool(keep.all()) else ops.loc[keep]
        is_graph = filled(0, len(j), bool)
        nodes = as_column(j, filled(0, len(j), np.int32))
    # a GPU operation cannot start before the call that launched it: one that does (clocks apart, a
    # damaged trace) queued 0 ns, never a negative time
    j = j.assign(gpu_ns=j["dur_ns"], api_ns=j["api_end_ns"] - j["api_start_ns"],
                 queue_ns=(j["start_ns"] - j["api_start_ns"]).clip(lower=0))
    j = j.assign(launch_dominated=as_column(j, compact((j["api_ns"] > j["gpu_ns"]).to_numpy())),
                 is_graph=as_column(j, compact(is_graph)), graph_nodes=nodes)
    j = j[COLUMNS]
    return sort_rows(j, (j["correlation_id"].to_numpy(), j["start_ns"].to_numpy()))


def _with_graph_launches(plain: pd.DataFrame, graph: pd.DataFrame) -> pd.DataFrame:
    """The plain kernels' rows and one row per graph launch (process, correlation id) of ``graph``
    (its GPU operations), in one frame: start the launch's first operation's start, end its last
    end, device and stream those of its first operation, op "graph", name the graph record's
    (traced whole) or ``GRAPH_NAME``, graph_nodes its operations traced at node level."""
    pid, corr = graph["pid"].to_numpy(np.int64), graph["correlation_id"].to_numpy(np.int64)
    st, en = graph["start_ns"].to_numpy(np.int64), graph["end_ns"].to_numpy(np.int64)
    order = np.lexsort((st, corr, pid))
    ps, cs = pid[order], corr[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (ps[1:] != ps[:-1]) | (cs[1:] != cs[:-1])
    starts = np.flatnonzero(first)
    head = order[starts]  # each launch's earliest-starting operation
    node = ~name_in(graph["op"], ("graph",))  # a GPU record of one node (node-level tracing)
    n_nodes = np.add.reduceat(node[order].astype(np.int32), starts) if len(starts) else np.zeros(0, np.int32)
    end = np.maximum.reduceat(en[order], starts) if len(starts) else np.zeros(0, np.int64)
    g = graph.iloc[head]
    names = np.array(g["name"].astype(object).to_numpy(), dtype=object)
    names[n_nodes > 0] = GRAPH_NAME
    launched = pd.DataFrame({
        **{c: g[c].to_numpy() for c in ("device_id", "stream_id", "pid", "tid", "correlation_id",
                                          "api_start_ns", "api_end_ns")},
        "start_ns": st[head], "end_ns": end, "dur_ns": end - st[head], "name": names, "op": "graph",
        "api_name": g["api_name"].astype(object).to_numpy(), "graph_nodes": n_nodes})
    cols = ["start_ns", "end_ns", "dur_ns", "device_id", "stream_id", "pid", "tid", "correlation_id", "name",
            "op", "api_name", "api_start_ns", "api_end_ns"]
    data: dict[str, object] = {}
    for c in cols:
        a, b = plain[c], launched[c]
        if isinstance(a.array, pd.Categorical):  # the launches' values added to the categories (codes kept)
            values = b.to_numpy(dtype=object)
            have = set(a.array.categories)
            extra = [v for v in pd.unique(values) if v not in have]
            cat = a.array.add_categories(extra) if extra else a.array
            codes = np.concatenate([np.asarray(cat.codes), cat.categories.get_indexer(values)])
            data[c] = pd.Categorical.from_codes(codes, dtype=cat.dtype, validate=False)
        else:
            data[c] = np.concatenate([a.to_numpy(), b.to_numpy().astype(a.dtype)])
    data["graph_nodes"] = np.concatenate([np.zeros(len(plain), np.int32), n_nodes.astype(np.int32)])
    return pd.DataFrame(data)


def launch_summary(lau: pd.DataFrame) -> dict[str, object]:
    """Totals over launches, split into ordinary kernel launches and graph launches (``count``: the
    graph launch calls that ran, at either tracing level; their times per launch: the call, the
    launch's GPU span, its queueing). Graph launches also give ``node_ops``: the GPU operations their
    graphs ran when traced at node level (0 when traced whole: the nodes are not in the trace)."""
    graph = lau["is_graph"].to_numpy(dtype=bool)
    api, gpu_, queue = (lau[c].to_numpy() for c in ("api_ns", "gpu_ns", "queue_ns"))
    dominated = lau["launch_dominated"].to_numpy(dtype=bool)

    def part(mask: np.ndarray) -> dict[str, object]:
        n = int(mask.sum())
        if n == 0:
            return {"count": 0}
        every = n == len(mask)  # no graph launches (the usual case): the columns themselves, no copies
        a, g, d = (api, gpu_, dominated) if every else (api[mask], gpu_[mask], dominated[mask])
        return {
            "count": n,
            "api_total_ns": int(a.sum()),
            "api_med_ns": int(round(float(np.median(a)))),
            "gpu_total_ns": int(g.sum()),
            "gpu_med_ns": int(round(float(np.median(g)))),
            "queue_med_ns": int(round(float(np.median(queue if every else queue[mask])))),
            "launch_dominated_count": int(d.sum()),
            "launch_dominated_frac": float(d.mean()),
        }

    graphs = part(graph)
    if graphs["count"]:
        graphs["node_ops"] = int(lau["graph_nodes"].to_numpy()[graph].sum())
    return {"kernels": part(~graph), "graphs": graphs}


PER_KERNEL_COLUMNS = ["api_name", "name", "count", "api_med_ns", "queue_med_ns", "gpu_med_ns", "launch_dominated_frac"]


def per_kernel(lau: pd.DataFrame) -> pd.DataFrame:
    """Per (api_name, kernel name): count, median API/queue/GPU times, share launch-dominated."""
    if len(lau) == 0:
        return pd.DataFrame(columns=PER_KERNEL_COLUMNS)
    out = _per_kernel_by_codes(lau)
    if out is None:
        g = lau.groupby(["api_name", "name"], sort=True, observed=True)
        out = g.agg(count=("gpu_ns", "size"), api_med_ns=("api_ns", "median"), queue_med_ns=("queue_ns", "median"),
                    gpu_med_ns=("gpu_ns", "median"), launch_dominated_frac=("launch_dominated", "mean")).reset_index()
    return out.sort_values(["count", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)


def _per_kernel_by_codes(lau: pd.DataFrame) -> pd.DataFrame | None:
    """``per_kernel``'s group-by on the categorical codes: rows grouped by one stable radix sort of
    small group ids, medians by selection inside each group. None when the keys are not both
    categorical or there are too many groups (pandas then groups)."""
    an, kn = lau["api_name"].array, lau["name"].array
    if not (isinstance(an, pd.Categorical) and isinstance(kn, pd.Categorical)):
        return None
    span = max(len(an.categories), 1) * max(len(kn.categories), 1)
    kt = np.int32 if span < 1 << 31 else np.int64  # narrow keys: half the memory of these 1M-row temporaries
    a: np.ndarray = np.asarray(an.codes).astype(kt)
    b: np.ndarray = np.asarray(kn.codes).astype(kt)
    valid = (a >= 0) & (b >= 0)  # a missing key leaves the row out, as groupby does
    rows = None if bool(valid.all()) else np.flatnonzero(valid)  # None: every row
    if rows is not None:
        a, b = a[rows], b[rows]
    key = a * kt(max(len(kn.categories), 1)) + b
    del a, b, valid
    if span <= 1 << 22:  # a dense table of the (api, name) combinations: no hashing or sort
        present = np.bincount(key, minlength=span) > 0
        uniq = np.flatnonzero(present)
        if len(uniq) > 4096:
            return None
        gid = (np.cumsum(present) - 1).astype(np.int16)[key]  # int16 group ids, one per launch
    else:
        uniq, gid = np.unique(key, return_inverse=True)
        if len(uniq) > 4096:
            return None
        gid = gid.astype(np.int16)
    del key
    order = np.argsort(gid, kind="stable")  # radix sort: linear
    if rows is not None:
        order = rows[order]
    counts = np.bincount(gid, minlength=len(uniq))
    bounds = np.concatenate([[0], np.cumsum(counts)])

    def medians(col: str) -> np.ndarray:
        v = lau[col].to_numpy()[order]
        return np.array([np.median(v[bounds[i]:bounds[i + 1]]) for i in range(len(uniq))], dtype=np.float64)

    # launch-dominated launches counted per group (exact integers: the float sums they replace gave
    # the same shares), from the group ids of those launches only: no float per launch
    dom = lau["launch_dominated"].to_numpy(dtype=bool)
    dom = dom if rows is None else dom[rows]
    frac = np.bincount(gid[dom], minlength=len(uniq)) / counts
    return pd.DataFrame({
        "api_name": pd.Categorical.from_codes(uniq // max(len(kn.categories), 1), dtype=an.dtype),
        "name": pd.Categorical.from_codes(uniq % max(len(kn.categories), 1), dtype=kn.dtype),
        "count": counts.astype(np.int64), "api_med_ns": medians("api_ns"), "queue_med_ns": medians("queue_ns"),
        "gpu_med_ns": medians("gpu_ns"), "launch_dominated_frac": frac})
