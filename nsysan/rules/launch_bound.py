"""Many short kernels whose launch costs as much as or more than their execution.

**Why it matters**: each launch costs the CPU a few microseconds; when kernels run for less than
that, the GPU idles between them and the loop runs at the speed of the launching thread.

**Fix**: capture the repeated sequence once as a CUDA Graph and replay it (cudaStreamBeginCapture /
cudaGraphInstantiate / cudaGraphLaunch; ``torch.cuda.CUDAGraph``; TensorRT: capture
``execute_async_v3``), or fuse kernels (torch.compile, TensorRT).

Launch cost is judged robustly: per kernel (launching API and kernel name), the median CPU time
of its launches in the steady state, with each kernel's first launch in the trace left out (lazy
module loading, a one-time cost of up to seconds, reported apart in the message). A launch is
launch-dominated when that median exceeds its GPU time. Impact: per launch-dominated launch, the
launch cost (its CPU time, capped at its kernel's median) minus its GPU time, summed, bounded by
the GPU idle time between launches; claimed on those idle gaps' wall-clock time (shared with
host-bound-gap and sync-api, never counted twice). Graph launches (``cudaGraphLaunch``) are
recognised and reported apart; they are not counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.frames import rows_of, top_rows
from nsysan.rules._base import Finding, Severity, claims_of, finding, rule, top_records
from nsysan.rules._helpers import steady_cpu, window_gap_rows
from nsysan.units import fmt_ns, fmt_pct

CHUNK = 1 << 18  # launches judged together (the working set's bound)


@rule("launch-bound", "Kernel launches cost more than the kernels", min_kernels=100, min_dominated_frac=0.3,
      max_kernel_ns=50_000)
def check(ctx: Any, *, min_kernels: int, min_dominated_frac: float, max_kernel_ns: int) -> Iterator[Finding]:
    # masks over the launch frame (a million rows on big traces): only the needed columns are copied
    lau, w = ctx.a.launches, ctx.window
    if len(lau) == 0:
        return
    is_graph = lau["is_graph"].to_numpy(dtype=bool)
    key = _kernel_key(lau)
    api_start = lau["api_start_ns"].to_numpy()
    first = first_launches(key, api_start)  # each kernel's first launch (module loading): one-time
    inside = (lau["start_ns"].to_numpy() < w.end_ns) & (lau["end_ns"].to_numpy() > w.start_ns)
    plain = inside & ~is_graph
    n_graphs = int((inside & is_graph).sum())
    firsts = np.flatnonzero(plain & first)
    rows = np.flatnonzero(plain & ~first)
    del first, inside, plain, is_graph, api_start  # (per-launch temporaries let go as soon as done)
    if len(rows) < min_kernels:
        return
    gpu_ns, api_ns = lau["gpu_ns"].to_numpy(), lau["api_ns"].to_numpy()
    # each kernel's median launch cost (one per key), then the launches a chunk at a time: no
    # float or int64 array of every launch (the 1.2M launches of a 245 MB trace: 87 -> 30 MiB)
    keys, med_of = _median_per_key(key[rows], api_ns[rows], own=True)
    dom_parts: list[np.ndarray] = []
    saving = 0
    for a in range(0, len(rows), CHUNK):
        r = rows[a:a + CHUNK]
        med = med_of[np.searchsorted(keys, key[r])]
        run = gpu_ns[r]
        sel = (med > run) & (run <= max_kernel_ns)
        d = r[sel]
        # each dominated launch's cost capped at its kernel's median, above its run time (floats
        # that are whole or half nanoseconds: their sums are exact, in chunks or not)
        saving += float(np.clip(np.minimum(api_ns[d], med[sel]) - gpu_ns[d], 0, None).sum())
        dom_parts.append(d)
    saving = int(saving)
    dom = np.concatenate(dom_parts) if dom_parts else np.zeros(0, np.int64)
    del dom_parts, keys, med_of, key
    frac = len(dom) / len(rows)
    if frac < min_dominated_frac:
        return
    g = ctx.a.gaps  # the window's gaps, as positions; their starts and ends (the claims) are views of
    # the gaps' columns when the positions are one run (one device), else copies
    gap_rows = window_gap_rows(ctx) if len(g) else np.zeros(0, dtype=np.int64)
    idle = int(g["gap_ns"].to_numpy()[gap_rows].sum()) if len(gap_rows) else 0
    impact = min(saving, idle) if idle else saving
    claims = claims_of(rows_of(g["start_ns"].to_numpy(), gap_rows),
                       rows_of(g["end_ns"].to_numpy(), gap_rows)) if len(gap_rows) else None
    graph_note = f" {n_graphs} CUDA Graph launches are already used for part of the work." if n_graphs else ""
    once = ""
    if len(firsts):
        big = firsts[np.argsort(-api_ns[firsts], kind="stable")[:1]]
        once = (f" Not counted: the first launch of each kernel ({len(firsts)} in the steady state, "
                f"{fmt_ns(int(api_ns[firsts].sum()))}, the longest {fmt_ns(int(api_ns[big[0]]))}: lazy module "
                f"loading, a one-time cost).")
    cols = ["name", "api_name", "api_ns", "gpu_ns", "queue_ns", "start_ns"]
    top = lau[cols].iloc[top_rows(api_ns, dom, 10)]
    yield finding(ctx, "launch-bound", severity=Severity.WARNING, impact_ns=impact, claims=claims,
                  message=f"{len(dom)} of {len(rows)} kernel launches in the steady state ({fmt_pct(frac)}) took longer "
                          f"to launch (median {fmt_ns(np.median(api_ns[dom], overwrite_input=True))}) than to run "
                          f"(median {fmt_ns(np.median(gpu_ns[dom], overwrite_input=True))}); launch cost above run time {fmt_ns(saving)} (each "
                          f"launch capped at its kernel's median).{graph_note}{once}{steady_cpu(ctx)}",
                  evidence=top_records(top.assign(name=top["name"].astype(str).str.slice(0, 160)), "api_ns", 10, cols))


def first_launches(key: np.ndarray, api_start: np.ndarray, fast: bool = True) -> np.ndarray:
    """Per launch, whether it is its key's first: the earliest call (``api_start``), ties to the
    earlier row. Launches in call order (the usual case, ``fast``): a key's first row, found by
    writing positions backwards (the last write, the smallest, stays), with no sort of them all;
    else a stable sort by (key, call start)."""
    first = np.zeros(len(key), dtype=bool)
    if (fast and len(key) > 1 and int(key.min()) >= 0 and int(key.max()) < 8 * len(key) + (1 << 20)
            and bool((api_start[1:] >= api_start[:-1]).all())):
        pt = np.int32 if len(key) < 1 << 31 else np.int64  # positions: half the room of int64
        pos = np.full(int(key.max()) + 1, -1, dtype=pt)
        pos[key[::-1]] = np.arange(len(key) - 1, -1, -1, dtype=pt)
        first[pos[pos >= 0]] = True
        return first
    order = np.lexsort((api_start, key))
    ks = key[order]
    first_of = np.ones(len(order), dtype=bool)
    np.not_equal(ks[1:], ks[:-1], out=first_of[1:])
    del ks
    first[order[first_of]] = True
    return first


def _kernel_key(lau: pd.DataFrame) -> np.ndarray:
    """A key per (launching API, kernel name): int32 where the keys fit (half the memory of a
    million-launch temporary; the same values, so the same order), else int64."""
    out = []
    for c in ("api_name", "name"):
        arr = lau[c].array
        codes = np.asarray(arr.codes) if isinstance(arr, pd.Categorical) else pd.factorize(lau[c])[0]
        out.append(codes)
    hi = [int(c.max(initial=-1)) + 1 for c in out]  # the largest code + 1 of each
    kt = np.int32 if (hi[0] + 1) * (hi[1] + 1) < 1 << 31 else np.int64
    a, b = (c.astype(kt) for c in out)
    a += 1
    b += 1
    a *= kt(hi[1] + 1)
    a += b
    return a


def _median_by(key: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Per element, the median of ``v`` over the elements with the same key."""
    keys, med = _median_per_key(key, v)
    return med[np.searchsorted(keys, key)]


def _median_per_key(key: np.ndarray, v: np.ndarray, own: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys (ascending) and the median of ``v`` over each key's elements. ``own``: ``v``
    is a temporary of the caller's, int64, that may be overwritten (no copy of it is made)."""
    vi = np.asarray(v)
    if len(vi) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    if vi.dtype.kind in "iu" and int(vi.min()) >= 0 and int(vi.max()) < (1 << 40) \
            and int(key.min()) >= 0 and int(key.max()) < (1 << 23):
        # one int64 array, sorted in place: each key's values come out contiguous and ordered, so
        # its median is a position; the key goes in above the value a chunk at a time (no int64
        # copy of every key)
        c = vi if own and vi.dtype == np.int64 else vi.astype(np.int64)
        for a in range(0, len(c), CHUNK):
            k = key[a:a + CHUNK].astype(np.int64)
            k <<= 40
            c[a:a + CHUNK] |= k
        del k
        c.sort()
        n_keys = int(key.max()) + 1
        if n_keys <= max(len(c) >> 4, 1024):  # each key's first element by binary search
            starts = np.searchsorted(c, np.arange(n_keys, dtype=np.int64) << 40)
            starts = starts[np.flatnonzero(np.diff(np.append(starts, len(c))))]
        else:
            starts = np.flatnonzero(np.concatenate([[True], (c[1:] >> 40) != (c[:-1] >> 40)]))
        ends = np.concatenate([starts[1:], [len(c)]])
        lo, hi = (starts + ends - 1) // 2, (starts + ends) // 2
        keys = c[starts] >> 40
        c &= (1 << 40) - 1
        return keys, (c[lo] + c[hi]) / 2
    order = np.lexsort((v, key))
    k, vs = key[order], v[order]
    starts = np.flatnonzero(np.concatenate([[True], k[1:] != k[:-1]]))
    ends = np.concatenate([starts[1:], [len(k)]])
    lo, hi = (starts + ends - 1) // 2, (starts + ends) // 2
    return k[starts], (vs[lo] + vs[hi]) / 2
