"""Small kernels launched one by one: the GPU waits for the host to launch them.

**Why it matters**: each launch costs the CPU a few microseconds, and eager frameworks add tens of
microseconds of Python per operation; when kernels run for less than that, the GPU idles between
them and the loop runs at the speed of the launching thread, not of the GPU.

**Fix**: capture the repeated sequence once as a CUDA Graph and replay it (cudaStreamBeginCapture /
cudaGraphInstantiate / cudaGraphLaunch; ``torch.cuda.CUDAGraph``; TensorRT: capture
``execute_async_v3``), or fuse kernels (torch.compile, TensorRT). The suggestion is written in the
program's terms (as recognised in the trace): PyTorch, JAX, CuPy, TensorRT, OpenACC/OpenMP or CUDA.

**Per iteration** (with an iteration model): the kernel launches each steady-state iteration's
thread makes inside it, in runs broken where the thread changed device or spent more than
``max_launch_gap_ns``, or ``ONE_TIME_OUTLIER`` (20) x its median, between two launches: that is
other host work (host-bound-gap's, sync-api's), not launching. In the eager loops recorded here
(decode, generate, serving) under 3% of the host time between launches is in gaps over 200 us; in
training loops with other host work between launches (FSDP, pipeline stages, gradient
accumulation, inline data loading) 55-90% is. The GPU idle time (no op of any process on the
device) inside the CPU span of each run, its first launch call's start to its last one's end, is
the GPU waiting for launches, which a graph replay or fused kernels remove: the saving. Impact: the
sum over the steady iterations, at most their count x the median iteration's (a one-time stall,
lazy module loading in a first launch, is not a per-iteration cost); with several sequences
(threads, ranks) running at once, the largest sequence's, not their sum; claimed on those idle
intervals (shared with host-bound-gap and sync-api, never counted twice). The message names the
NVTX range the launches happen in (the innermost one holding most of them) and the kernels per
iteration. Checked against measured fixes: decode_eager -> decode_graph and launch_eager ->
launch_graph, within 7% and 1% (``benchmarks/calibrate_savings.py``).

**Launch cost** (also the impact without an iteration model): per kernel (launching API and kernel
name), the median CPU time of its launches in the steady state, with each kernel's first launch in
the trace left out (lazy module loading, reported apart). A launch is launch-dominated when that
median exceeds its GPU time; without iterations the impact is, per launch-dominated launch, the
launch cost (capped at its kernel's median) minus its GPU time, bounded by the GPU idle time
between launches and claimed on those gaps. Fires when at least ``min_kernels`` launches ran and
either ``min_dominated_frac`` of them are launch-dominated or the GPU waited for launches at least
``min_frac`` of the window. Graph launches (``cudaGraphLaunch``) are recognised and reported
apart; they are not counted.

**Optimizers that loop over parameters** (``analyses/optimizer.py``): when the optimizer part of
the steady iterations (an NVTX range named like ``optimizer``/``opt``, else the launches after the
last backward kernel) launches at least 100 small element-wise kernels per iteration and no fused
``multi_tensor_apply`` kernel (``torch.optim`` with ``foreach=False``), the message says so and the
fix leads with the optimizer's own flag (``fused=True``/``foreach=True``, ``apex.optimizers.FusedAdam``),
with the flag's own saving: per iteration (median), the GPU idle time inside the CPU span of the
optimizer part's launch calls. Recorded under nsys, whose tracing slows each launch, it overstates the
saving without the profiler: optim_foreach_false (Adam, 200 parameters, H200) 24.9 ms a step against
13.8 ms measured (``tests/rules/test_optimizer_loop_sql.py``). The finding's impact stays the whole
iteration's wait (a CUDA Graph of the step removes it all).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import rows_of, top_rows
from nsysan.analyses.optimizer import OptimizerLoop, per_parameter_optimizer
from nsysan.analyses.program import Program
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule, top_records
from nsysan.rules._launch_wait import per_iteration
from nsysan.rules._window import steady_iterations, window_gap_rows
from nsysan.rules._wording import steady_cpu
from nsysan.units import fmt_ns, fmt_pct

CHUNK = 1 << 18  # launches judged together (the working set's bound)


@rule("launch-bound", "Kernel launches cost more than the kernels", min_kernels=100, min_dominated_frac=0.3,
      max_kernel_ns=50_000, min_frac=0.05, max_launch_gap_ns=200_000)
def check(ctx: RuleContext, *, min_kernels: int, min_dominated_frac: float, max_kernel_ns: int,
          min_frac: float, max_launch_gap_ns: int) -> Iterator[Finding]:
    # masks over the launch frame (a million rows on big traces): only the needed columns are copied
    launches, w = ctx.a.launches, ctx.window
    if len(launches) == 0:
        return
    is_graph = launches["is_graph"].to_numpy(dtype=bool)
    key = _kernel_key(launches)
    api_start = launches["api_start_ns"].to_numpy()
    first = first_launches(key, api_start)  # each kernel's first launch (module loading): one-time
    inside = (launches["start_ns"].to_numpy() < w.end_ns) & (launches["end_ns"].to_numpy() > w.start_ns)
    plain = inside & ~is_graph
    n_graphs = int((inside & is_graph).sum())
    firsts = np.flatnonzero(plain & first)
    rows = np.flatnonzero(plain & ~first)
    every = np.flatnonzero(plain)  # the per-iteration spans: every launch, first ones included
    del first, inside, plain, is_graph, api_start  # (per-launch temporaries let go as soon as done)
    if len(rows) < max(min_kernels, 1):  # (none to judge even when the threshold is 0)
        return
    gpu_ns, api_ns = launches["gpu_ns"].to_numpy(), launches["api_ns"].to_numpy()
    dom, saving = _dominated(rows, key, api_ns, gpu_ns, max_kernel_ns)
    del key
    frac = len(dom) / len(rows)
    n_rows = len(rows)
    top_at = top_rows(api_ns, dom if len(dom) else rows, 10)  # the evidence: the ten costliest launches
    del rows  # (before the per-iteration look at the launches, which needs room of its own)
    per = per_iteration(ctx, launches, every, max_launch_gap_ns)
    del every
    claims: tuple[np.ndarray, np.ndarray] | None
    if per is not None:  # the GPU's wait for the launches, iteration by iteration
        impact, claims = per.estimate, per.claims
        if frac < min_dominated_frac and impact < min_frac * w.dur_ns:
            return
    else:
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
        once = (f" Not counted: the first launch of each kernel ({len(firsts)} in the {w.label}, "
                f"{fmt_ns(int(api_ns[firsts].sum()))}, the longest {fmt_ns(int(api_ns[big[0]]))}: lazy module "
                f"loading, a one-time cost).")
    cost = (f"{len(dom)} of {n_rows} kernel launches in the {w.label} ({fmt_pct(frac)}) took longer "
            f"to launch (median {fmt_ns(np.median(api_ns[dom], overwrite_input=True)) if len(dom) else '-'}) than to "
            f"run (median {fmt_ns(np.median(gpu_ns[dom], overwrite_input=True)) if len(dom) else '-'})")
    if per is not None:
        message = per.sentence(ctx) + f" {cost}.{graph_note}{once}{steady_cpu(ctx)}"
    else:
        message = (f"{cost}; launch cost above run time {fmt_ns(saving)} (each launch capped at its kernel's "
                   f"median).{graph_note}{once}{steady_cpu(ctx)}")
    cols = ["name", "api_name", "api_ns", "gpu_ns", "queue_ns", "start_ns"]
    top = launches.iloc[top_at][cols]  # ten rows first, then the columns
    del dom, firsts  # (the optimizer's look at the launches needs room of its own)
    message, suggestion = _optimizer_words(ctx, launches, message)
    yield finding(ctx, "launch-bound", severity=Severity.WARNING, impact_ns=impact, claims=claims, message=message,
                  suggestion=suggestion,
                  evidence=top_records(top.assign(name=top["name"].astype(str).str.slice(0, 160)), "api_ns", 10, cols))


def _dominated(rows: np.ndarray, key: np.ndarray, api_ns: np.ndarray, gpu_ns: np.ndarray,
               max_kernel_ns: int) -> tuple[np.ndarray, int]:
    """The launches among ``rows`` that took longer to launch than their kernel's median run (short
    kernels only), and their launch cost above the run time, each capped at its kernel's median.
    Each kernel's median launch cost (one per key), then the launches a chunk at a time: no float or
    int64 array of every launch (the 1.2M launches of a 245 MB trace: 87 -> 30 MiB)."""
    keys, med_of = _median_per_key(key[rows], api_ns[rows], own=True)
    dom_parts: list[np.ndarray] = []
    saved = 0.0
    for a in range(0, len(rows), CHUNK):
        r = rows[a:a + CHUNK]
        med = med_of[np.searchsorted(keys, key[r])]
        run = gpu_ns[r]
        sel = (med > run) & (run <= max_kernel_ns)
        d = r[sel]
        # each dominated launch's cost capped at its kernel's median, above its run time (floats
        # that are whole or half nanoseconds: their sums are exact, in chunks or not)
        saved += float(np.clip(np.minimum(api_ns[d], med[sel]) - gpu_ns[d], 0, None).sum())
        dom_parts.append(d)
    return (np.concatenate(dom_parts) if dom_parts else np.zeros(0, np.int64)), int(saved)


def _optimizer_words(ctx: RuleContext, launches: pd.DataFrame, message: str) -> tuple[str, str]:
    """The message and the fix, the optimizer's own flag first when the optimizer loops over parameters."""
    prog = ctx.program
    suggestion = advice(prog)
    opt = None if prog.jax else per_parameter_optimizer(launches, ctx.trace.nvtx, steady_iterations(ctx))
    if opt is not None:  # the optimizer's own flag, before graphs or compilation
        wait = optimizer_wait(ctx, opt)
        alone = (f" The flag alone would save about {fmt_ns(wait)} per iteration (median): the GPU's wait for the "
                 "optimizer's launches, which a few fused kernels remove (as recorded: the profiler's tracing slows "
                 "each launch, so the saving without it is smaller)." if wait is not None else "")
        message += (f" The optimizer loops over parameters: {opt.kernels:g} small element-wise kernels per "
                    f"iteration ({opt.part}, median; {fmt_ns(opt.gpu_ns)} of GPU work) and no fused "
                    f"multi_tensor_apply kernel.{alone}")
        suggestion = OPTIMIZER_FIX + " " + suggestion
    return message, suggestion


def optimizer_wait(ctx: RuleContext, opt: OptimizerLoop) -> int | None:
    """The saving of the optimizer's own flag, per iteration (median, ns): the GPU idle time (no op
    of any process on its device) inside the CPU span of the optimizer part's launch calls, which a
    fused optimizer's few launches would not leave. None without spans or device activity."""
    busy = ctx.a.busy
    if not opt.spans or busy is None:
        return None
    ms, me = busy.per_dev.get(opt.device_id, {}).get("all", (np.zeros(0, np.int64), np.zeros(0, np.int64)))
    lo = np.array([s for s, _ in opt.spans], dtype=np.int64)
    hi = np.array([e for _, e in opt.spans], dtype=np.int64)
    return int(np.median((hi - lo) - iv.covered_between(ms, me, lo, hi)))


def first_launches(key: np.ndarray, api_start: np.ndarray, fast: bool = True) -> np.ndarray:
    """Per launch, whether it is its key's first: the earliest call (``api_start``), ties to the
    earlier row. Launches in call order (the usual case, ``fast``): a key's first row, found by
    writing positions backwards (the last write, the smallest, stays), with no sort of them all;
    else a stable sort by (key, call start)."""
    first = np.zeros(len(key), dtype=bool)
    if (fast and len(key) > 1 and int(key.min()) >= 0 and int(key.max()) < 8 * len(key) + (1 << 20)
            and bool((api_start[1:] >= api_start[:-1]).all())):
        pt = np.int32 if len(key) < 1 << 31 else np.int64  # positions: half the room of int64
        pos: np.ndarray = np.full(int(key.max()) + 1, -1, dtype=pt)
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


def _kernel_key(launches: pd.DataFrame) -> np.ndarray:
    """A key per (launching API, kernel name): int32 where the keys fit (half the memory of a
    million-launch temporary; the same values, so the same order), else int64."""
    out = []
    for c in ("api_name", "name"):
        arr = launches[c].array
        codes = np.asarray(arr.codes) if isinstance(arr, pd.Categorical) else pd.factorize(launches[c])[0]
        out.append(codes)
    hi = [int(c.max(initial=-1)) + 1 for c in out]  # the largest code + 1 of each
    kt: type[np.signedinteger[Any]] = np.int32 if (hi[0] + 1) * (hi[1] + 1) < 1 << 31 else np.int64
    api_code, name_code = (c.astype(kt) for c in out)
    api_code += 1
    name_code += 1
    api_code *= kt(hi[1] + 1)
    api_code += name_code
    return api_code


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


OPTIMIZER_FIX = ("Use the optimizer's fused or multi-tensor form, one flag: ``torch.optim.AdamW(params, ..., "
                 "fused=True)`` (or ``foreach=True``; the same for Adam and SGD), or ``apex.optimizers.FusedAdam``: "
                 "a few ``multi_tensor_apply`` kernels a step instead of several per parameter (optax under "
                 "``jax.jit`` is fused already).")


ADVICE = Advice(
    tensorrt=("Capture the engine's enqueue once as a CUDA Graph and replay it (cudaStreamBeginCapture around "
              "``context.execute_async_v3``, cudaGraphInstantiate, cudaGraphLaunch each batch)."),
    torch=("Capture the repeated step once and replay it: ``torch.compile(model, mode=\"reduce-overhead\")`` "
           "(CUDA Graphs plus fused kernels), or ``torch.cuda.CUDAGraph`` / "
           "``torch.cuda.graphs.make_graphed_callables`` "
           "with static input buffers; for token-by-token decoding, a static KV cache makes the step capturable."),
    jax=("Put the whole step under one ``jax.jit`` (fewer, fused kernels per dispatch) instead of calling "
         "jitted pieces or eager ops from Python in a loop; ``jax.lax.scan``/``fori_loop`` keeps loops on the "
         "GPU."),
    cupy=("Capture the repeated sequence on a stream as a CUDA Graph (``stream.begin_capture()`` / "
          "``end_capture()``, then ``graph.launch()``), or fuse element-wise steps with ``cupy.fuse`` / "
          "``ElementwiseKernel``."),
    openacc=("Fewer, larger kernels: merge adjacent loops into one ``parallel`` region, ``collapse`` nested loops, "
             "and add ``async`` so launches queue while the GPU runs."),
    openmp=("Fewer, larger kernels: merge adjacent ``target`` regions, ``collapse`` nested loops, and add "
            "``nowait`` so launches queue while the GPU runs."),
    default=("Capture the repeated sequence once as a CUDA Graph and replay it (cudaStreamBeginCapture / "
             "cudaStreamEndCapture / cudaGraphInstantiate / cudaGraphLaunch), or fuse small kernels into larger "
             "ones."),
    first=("tensorrt",))  # a TensorRT engine's enqueue is what to capture, even when PyTorch drives it


def advice(p: Program) -> str:
    """Fewer, larger launches, in the program's terms."""
    return choose(ADVICE, p)
