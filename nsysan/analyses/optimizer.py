"""Optimizers that loop over parameters: many small element-wise kernels per step, no fused kernel.

``torch.optim.Adam``/``AdamW``/``SGD`` with ``foreach=False`` (or an optimizer written as a Python
loop over ``model.parameters()``) launches several element-wise kernels per parameter each step:
thousands for a model of hundreds of small tensors, each far shorter than its launch. The
``foreach`` and ``fused`` implementations (and ``apex.optimizers.FusedAdam``, optax under
``jax.jit``) run them as a few ``multi_tensor_apply`` kernels instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from nsysan.analyses.frames import rows_of, text_codes

ELEMENTWISE = re.compile(r"elementwise|pointwise|_foreach_|Functor", re.I)
FUSED = re.compile(r"multi_tensor_apply|FusedOptimizer|fused_?adam|FusedAdam|fused_sgd", re.I)
OPTIMIZER_RANGE = re.compile(r"(?:^|[^a-z])(?:optim\w*|opt|opt_step|optimizer_step)(?:$|[^a-z])", re.I)
BACKWARD = re.compile(r"backward|bwd|_grad_|Backward|dgrad|wgrad", re.I)


@dataclass(frozen=True)
class OptimizerLoop:
    """The optimizer part of the steady iterations, when it loops over parameters."""

    iterations: int  # steady iterations with an optimizer part
    kernels: float  # small element-wise kernel launches in it per iteration (median)
    gpu_ns: int  # their GPU time per iteration (median)
    part: str  # how the optimizer part was found: "NVTX range 'NAME'" or "after the last backward kernel"
    spans: tuple[tuple[int, int], ...] = ()  # per iteration: its launch calls' first start, last end (ns)
    device_id: int = 0  # the device most of its kernels ran on


def per_parameter_optimizer(launches: pd.DataFrame, nvtx: pd.DataFrame, iterations: pd.DataFrame, *,
                            min_kernels: int = 100, max_kernel_ns: int = 50_000) -> OptimizerLoop | None:
    """Per steady iteration (``iterations``: pid, tid, start_ns, end_ns), the optimizer part on its
    thread: an NVTX range inside the iteration named like ``optimizer``/``opt``/``optim_step``, else
    the launches after the iteration's last backward kernel (names with ``backward``, ``bwd``,
    ``dgrad``...). It loops over parameters when its median count of element-wise kernel launches
    that run at most ``max_kernel_ns`` each is at least ``min_kernels`` and none of its kernels is a
    fused one (``multi_tensor_apply``, ``FusedAdam``...). ``launches``: ``analyses.launch.launches``
    (name, pid, tid, api_start_ns, gpu_ns, is_graph; api_end_ns and device_id when present). ``spans``:
    per iteration, the CPU span of all the optimizer part's launch calls (first call's start to the
    last one's end), where a fused optimizer would launch a few kernels instead. None when the
    optimizer part is not found or is fused or small."""
    if len(iterations) == 0 or len(launches) == 0:
        return None
    lo_all, hi_all = int(iterations["start_ns"].min()), int(iterations["end_ns"].max())
    a_all = launches["api_start_ns"].to_numpy()
    keep = (a_all >= lo_all) & (a_all <= hi_all) & ~launches["is_graph"].to_numpy(dtype=bool)
    pos = np.flatnonzero(keep)
    del keep
    # the launches in call order, by position: each iteration's rows are read from the columns as
    # they are (no copy of every launch's columns: a million launches on big traces)
    a = rows_of(a_all, pos)
    if len(a) > 1 and not bool((a[1:] >= a[:-1]).all()):  # (in call order already: no sort, no copy)
        pos = pos[np.argsort(a, kind="stable")]
        a = a_all[pos]
    codes, texts = text_codes(launches["name"])
    text = pd.Series(texts, dtype=object)
    is_elem, is_fused, is_back = (text.str.contains(x).to_numpy() if len(text) else np.zeros(0, bool)
                                  for x in (ELEMENTWISE, FUSED, BACKWARD))
    g, pid, tid = (launches[c].to_numpy() for c in ("gpu_ns", "pid", "tid"))
    ae = launches["api_end_ns"].to_numpy() if "api_end_ns" in launches.columns else a_all
    dev = launches["device_id"].to_numpy() if "device_id" in launches.columns else np.zeros(len(a_all), np.int64)
    nv = _optimizer_ranges(nvtx)
    counts, gpus, parts, spans, devs = [], [], set(), [], []
    for it in iterations.itertuples(index=False):
        s, e = int(it.start_ns), int(it.end_ns)
        rows = pos[int(np.searchsorted(a, s, side="left")):int(np.searchsorted(a, e, side="right"))]
        mine = rows[(pid[rows] == it.pid) & (tid[rows] == it.tid)]
        lo, hi, part = _range_part(nv, it.pid, it.tid, s, e)
        if lo is None:
            b = mine[is_back[codes[mine]]]
            if not len(b):
                continue
            lo, part = int(a_all[b].max()) + 1, "after the last backward kernel"
        inside = mine[(a_all[mine] >= lo) & (a_all[mine] <= hi)]
        if is_fused[codes[inside]].any():
            return None
        sel = inside[is_elem[codes[inside]] & (g[inside] <= max_kernel_ns)]
        counts.append(len(sel))
        gpus.append(int(g[sel].sum()))
        parts.add(part)
        if len(inside):
            spans.append((int(a_all[inside].min()), int(ae[inside].max())))
            devs.append(dev[inside])
    if not counts or np.median(counts) < min_kernels:
        return None
    d = np.concatenate(devs) if devs else np.zeros(1, np.int64)
    vals, n = np.unique(d, return_counts=True)
    return OptimizerLoop(iterations=len(counts), kernels=float(np.median(counts)), gpu_ns=int(np.median(gpus)),
                         part=sorted(parts)[0], spans=tuple(spans), device_id=int(vals[np.argmax(n)]))


def _optimizer_ranges(nvtx: pd.DataFrame) -> pd.DataFrame:
    """The closed NVTX ranges named like an optimizer step."""
    nv = nvtx.loc[nvtx["end_ns"].notna()] if len(nvtx) else nvtx
    if len(nv):
        nv = nv.loc[nv["text"].fillna("").astype(str).str.contains(OPTIMIZER_RANGE).to_numpy()]
    return nv


def _range_part(nv: pd.DataFrame, pid: int, tid: int, s: int, e: int) -> tuple[int | None, int, str]:
    """The last optimizer range of the thread strictly inside the iteration [s, e]: (start, end, how
    found); (None, e, "") when none."""
    if len(nv):
        r = nv.loc[(nv["pid"].to_numpy() == pid) & (nv["tid"].to_numpy() == tid)
                   & (nv["start_ns"].to_numpy() >= s) & (nv["end_ns"].to_numpy(dtype=np.int64) <= e)
                   & ((nv["start_ns"].to_numpy() > s) | (nv["end_ns"].to_numpy(dtype=np.int64) < e))]
        if len(r):
            return int(r["start_ns"].iloc[-1]), int(r["end_ns"].iloc[-1]), f"NVTX range '{r['text'].iloc[-1]}'"
    return None, e, ""
