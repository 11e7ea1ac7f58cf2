"""TensorRT engines: executions told apart by their layer sequence, the executions cut by the end of the
capture, the CUDA Graph replays of captured executions, and the per-engine table.

What an engine, a context and a graph replay are: ``tensorrt``'s module docstring.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nsysan.analyses.frames import category_mask

GRAPH_LAUNCH = re.compile(r"^cu(da)?GraphLaunch")


def engine_numbers(l_exec: np.ndarray, l_text: np.ndarray, pos: np.ndarray, n_layers: np.ndarray,
             e_start: np.ndarray) -> np.ndarray:
    """Engine number per execution (1-based, in order of first execution): a hash of the ordered
    layer names (position-weighted sum of name codes, uint64 arithmetic) plus the layer count."""
    n_ex = len(n_layers)
    h = np.zeros(n_ex, dtype=np.uint64)
    if len(l_exec):
        codes, _ = pd.factorize(pd.Series(l_text, dtype=object))
        w = np.random.default_rng(12345).integers(1, 2**63 - 1, size=int(pos.max()) + 1,
                                                  dtype=np.int64).astype(np.uint64)
        with np.errstate(over="ignore"):
            contrib = (codes.astype(np.uint64) + np.uint64(1)) * w[pos]
        starts = np.flatnonzero(np.r_[True, l_exec[1:] != l_exec[:-1]])
        sums = np.add.reduceat(contrib, starts)
        h[l_exec[starts]] = sums
    key = pd.MultiIndex.from_arrays([h.astype(np.uint64), n_layers.astype(np.int64)])
    first_order = np.argsort(e_start, kind="stable")
    codes, _ = pd.factorize(key[first_order])
    out = np.empty(n_ex, dtype=np.int64)
    out[first_order] = codes + 1
    return out


def merge_truncated(engine: np.ndarray, l_exec: np.ndarray, l_text: np.ndarray, n_layers: np.ndarray,
                     pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """The last execution of a thread whose layers are a strict prefix of another engine's was cut
    by the end of the capture (nsys closes open ranges there): it joins that engine (``engine`` is
    changed in place) and is flagged truncated. Executions are sorted by (pid, tid, start)."""
    n = len(engine)
    truncated = np.zeros(n, dtype=bool)
    if n < 2 or len(l_exec) == 0:
        return truncated
    last = np.r_[(pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1]), True]
    first_ex = {}
    for e in np.unique(engine).tolist():
        first_ex[e] = int(np.flatnonzero(engine == e)[0])
    lo = np.searchsorted(l_exec, np.arange(n), side="left")
    hi = np.searchsorted(l_exec, np.arange(n), side="right")
    seq = {e: list(l_text[lo[i]:hi[i]]) for e, i in first_ex.items()}
    for i in np.flatnonzero(last).tolist():
        mine = list(l_text[lo[i]:hi[i]])
        if (engine == engine[i]).sum() != 1 or not mine:
            continue
        for e, sq in seq.items():
            if e != engine[i] and len(sq) > len(mine) and sq[:len(mine)] == mine:
                engine[i] = e
                truncated[i] = True
                break
    if truncated.any():  # renumber engines 1..k in order of first appearance
        _, codes = np.unique(engine, return_inverse=True)
        order: dict[int, int] = {}
        for c in codes[np.argsort([first_ex.get(int(engine[j]), j) for j in range(n)], kind="stable")].tolist():
            order.setdefault(c, len(order) + 1)
        engine[:] = np.array([order[c] for c in codes.tolist()], dtype=np.int64)
    return truncated


def graph_replays(ops: pd.DataFrame, executions: pd.DataFrame) -> pd.DataFrame:
    """Per engine: graph launches (count, GPU ns) of a process after one of its captured executions
    (assigned to the latest capture before them in the process)."""
    out = pd.DataFrame({"engine": pd.Series(dtype="int64"), "graph_replays": pd.Series(dtype="int64"),
                        "graph_replay_gpu_ns": pd.Series(dtype="int64")})
    cap = executions.loc[executions["captured"]]
    if len(cap) == 0 or len(ops) == 0 or "api_name" not in ops:
        return out
    gl = category_mask(ops["api_name"], lambda s: bool(GRAPH_LAUNCH.match(s)))
    if not gl.any():
        return out
    g = ops.loc[gl, ["pid", "api_start_ns", "correlation_id", "dur_ns"]]
    parts = []
    for pid, c in cap.groupby("pid", sort=True):
        c = c.sort_values("end_ns", kind="stable")
        gg = g.loc[g["pid"] == pid]
        i = np.searchsorted(c["end_ns"].to_numpy(), gg["api_start_ns"].to_numpy(), side="right") - 1
        ok = i >= 0
        parts.append(pd.DataFrame({"engine": c["engine"].to_numpy()[i[ok]],
                                   "correlation_id": gg["correlation_id"].to_numpy()[ok],
                                   "dur_ns": gg["dur_ns"].to_numpy()[ok]}))
    if not parts:
        return out
    p = pd.concat(parts, ignore_index=True)
    return p.groupby("engine", sort=True).agg(graph_replays=("correlation_id", "nunique"),
                                             graph_replay_gpu_ns=("dur_ns", "sum")).reset_index()


def engine_table(executions: pd.DataFrame, layers: pd.DataFrame,
                 replays: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per engine: engine, label, layers (per execution, median), executions, steady_executions,
    contexts (distinct thread-and-stream pairs), threads, streams, sync_executions,
    captured_executions, cpu_total_ns, cpu_p50_ns, gpu_total_ns, gpu_p50_ns (per execution),
    blocked_ns, first_layer, last_layer, graph_replays, graph_replay_gpu_ns."""
    cols = ["engine", "label", "layers", "executions", "steady_executions", "contexts", "threads", "streams",
            "sync_executions", "captured_executions", "cpu_total_ns", "cpu_p50_ns", "gpu_total_ns", "gpu_p50_ns",
            "blocked_ns", "first_layer", "last_layer", "graph_replays", "graph_replay_gpu_ns"]
    if len(executions) == 0:
        return pd.DataFrame({c: [] for c in cols})
    rows = []
    first = layers.loc[layers["pos"] == 0].drop_duplicates("engine").set_index("engine")["layer"] if len(layers) else {}
    last_idx = layers.groupby("exec_id", sort=False)["pos"].idxmax() if len(layers) else pd.Series(dtype="int64")
    last = (layers.loc[last_idx.to_numpy()].drop_duplicates("engine").set_index("engine")["layer"]
            if len(layers) else {})
    rep = replays.set_index("engine") if replays is not None and len(replays) else None
    for e, g in executions.groupby("engine", sort=True):
        e = int(e)
        n_l = int(np.median(g["layers"].to_numpy()))
        fl = str(first.get(e, "")) if len(layers) else ""
        ll = str(last.get(e, "")) if len(layers) else ""
        label = (f"engine {e} ({n_l} layers: {fl[:60]} ... {ll[:60]})" if n_l > 1 else
                 f"engine {e} ({n_l} layer: {fl[:60]})" if n_l == 1 else f"engine {e} (no layer ranges)")
        rows.append({
            "engine": e, "label": label, "layers": n_l, "executions": len(g),
            "steady_executions": int(g["steady"].sum()),
            "contexts": int(g[["pid", "tid", "stream_id"]].drop_duplicates().shape[0]),
            "threads": int(g[["pid", "tid"]].drop_duplicates().shape[0]),
            "streams": int(g.loc[g["stream_id"] >= 0, "stream_id"].nunique()),
            "sync_executions": int(g["sync"].sum()), "captured_executions": int(g["captured"].sum()),
            "cpu_total_ns": int(g["cpu_ns"].sum()), "cpu_p50_ns": int(np.median(g["cpu_ns"].to_numpy())),
            "gpu_total_ns": int(g["gpu_ns"].sum()), "gpu_p50_ns": int(np.median(g["gpu_ns"].to_numpy())),
            "blocked_ns": int(g["blocked_ns"].sum()), "first_layer": fl, "last_layer": ll,
            "graph_replays": int(rep.loc[e, "graph_replays"]) if rep is not None and e in rep.index else 0,
            "graph_replay_gpu_ns": int(rep.loc[e, "graph_replay_gpu_ns"]) if rep is not None and e in rep.index else 0,
        })
    return pd.DataFrame(rows, columns=cols)
