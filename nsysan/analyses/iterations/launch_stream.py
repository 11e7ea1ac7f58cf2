"""The launch stream of a process: one symbol per launch, in the order the CPU issued them, with
each launch's CPU call and GPU time (what ``inferred`` finds the loop in).

**The launch stream.** Per process, one symbol per launch (a kernel's name, a copy's kind, a memset,
a CUDA Graph launch; the nodes of one graph launch share its correlation id and count once), in the
order the CPU issued them, every thread of the process in one stream (``thread_loops`` reads it
per thread too, where threads launch side by side).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nsysan.analyses.join import launched


@dataclass(frozen=True)
class LaunchStream:
    pid: int
    tid: np.ndarray  # per launch
    sym: np.ndarray  # per launch: symbol code
    api_start: np.ndarray
    api_end: np.ndarray
    gpu_start: np.ndarray  # per launch: its ops' first start, last end, GPU time, op count
    gpu_end: np.ndarray
    gpu_ns: np.ndarray
    device: np.ndarray


def symbol_names(ops: pd.DataFrame) -> list[str]:
    """The name of each symbol code ``launch_streams`` gives: the ops' names, then the same names as
    the first node of a CUDA Graph launch traced per node."""
    names = ([str(x) for x in ops["name"].cat.categories] if isinstance(ops["name"].dtype, pd.CategoricalDtype)
             else [str(x) for x in pd.factorize(ops["name"].astype(str))[1]])
    return names + [f"[CUDA graph launch: {x}, ...]" for x in names] + ["[unnamed]"]


def launch_streams(ops: pd.DataFrame) -> list[LaunchStream]:
    """One stream of launches per process (ops with their launching call), in issue order."""
    if len(ops) == 0 or "api_start_ns" not in ops.columns:
        return []
    n_names = (len(symbol_names(ops)) - 1) // 2
    ok = launched(ops)
    names = ops["name"]
    codes = (names.cat.codes.to_numpy() if isinstance(names.dtype, pd.CategoricalDtype)
             else pd.factorize(names.astype(str))[0]).astype(np.int64)
    pid = ops["pid"].to_numpy().astype(np.int64)[ok]
    tid = ops["tid"].to_numpy().astype(np.int64)[ok]
    corr = ops["correlation_id"].to_numpy().astype(np.int64)[ok]
    api0 = ops["api_start_ns"].to_numpy().astype(np.int64)[ok]
    api1 = ops["api_end_ns"].to_numpy().astype(np.int64)[ok]
    st, en = ops["start_ns"].to_numpy().astype(np.int64)[ok], ops["end_ns"].to_numpy().astype(np.int64)[ok]
    dev = ops["device_id"].to_numpy().astype(np.int64)[ok]
    codes = codes[ok]
    order = np.lexsort((st, corr, api0, pid))
    cols = (pid, tid, corr, api0, api1, st, en, dev, codes)
    pid, tid, corr, api0, api1, st, en, dev, codes = (x[order] for x in cols)
    first = np.ones(len(pid), dtype=bool)  # one launch = one (pid, correlation id): graph nodes share it
    first[1:] = (pid[1:] != pid[:-1]) | (corr[1:] != corr[:-1])
    cuts = np.flatnonzero(first)
    dur = np.maximum(en - st, 0)
    gstart = np.minimum.reduceat(st, cuts) if len(cuts) else st
    gend = np.maximum.reduceat(en, cuts) if len(cuts) else en
    gns = np.add.reduceat(dur, cuts) if len(cuts) else dur
    pid, tid, api0, api1, dev, codes = (x[cuts] for x in (pid, tid, api0, api1, dev, codes))
    if "api_name" in ops.columns:  # a graph launch traced per node: its own symbol, not its first kernel's
        graph = ops["api_name"].astype(str).str.contains("GraphLaunch", regex=False).to_numpy()
        graph = graph[ok][order][cuts]
        codes = np.where(graph & (codes >= 0), codes + n_names, codes)
    codes = np.where(codes < 0, 2 * n_names, codes)  # an op without a name: one symbol of its own
    if len(pid) == 0:
        return []
    out = []
    bounds = np.flatnonzero(np.concatenate([[True], pid[1:] != pid[:-1], [True]]))
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        out.append(LaunchStream(int(pid[a]), tid[a:b], codes[a:b], api0[a:b], api1[a:b], gstart[a:b], gend[a:b],
                           gns[a:b], dev[a:b]))
    return out
