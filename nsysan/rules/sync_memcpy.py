"""Synchronous copies and memsets block the host in the steady state.

**Why it matters**: cudaMemcpy/cudaMemset (and async copies from pageable memory) return only when
the transfer is done, so the submitting thread cannot queue more work and the copy cannot overlap
compute. (nsys analyze: cuda_memcpy_sync, cuda_memset_sync.)

**Fix**: use cudaMemcpyAsync/cudaMemsetAsync on a non-default stream with pinned host memory, and
synchronize once per batch with an event (cudaEventRecord + cudaStreamWaitEvent/cudaEventSynchronize);
in the program's own terms (as recognised in the trace): OpenACC ``async`` clauses, PyTorch
``non_blocking=True`` copies and no per-step ``.item()``/``.cpu()``.

Impact: what the blocking costs beyond the copy itself (the copy's own time is pageable-memcpy's
and serial-copy-compute's): made asynchronous, a host-to-device copy or memset lets its thread
prepare the next work while it runs, so the GPU idle time right after each such copy, up to the
copy's time from pinned memory, is saved; claimed on that idle time. Copies to the host are not
counted: the host waits for their data either way. Silent when the trace has no copy
activity for these calls (no MEMCPY/MEMSET table: WSL2, ``-t osrt``): their GPU time is unknown.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import name_in
from nsysan.analyses.join import pack_keys
from nsysan.analyses.program import Program
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule, top_records
from nsysan.rules._copy_rates import ASSUMED_SPEEDUP, pinned_durations
from nsysan.rules._window import steady
from nsysan.rules._wording import call_sites
from nsysan.units import fmt_ns

SYNC_COPY_APIS = ("cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol",
                  "cudaMemset", "cudaMemset2D", "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpy", "cuMemsetD8",
                  "cuMemsetD32")


@rule("sync-memcpy", "Synchronous copies block the host", min_total_ns=100_000)
def check(ctx: RuleContext, *, min_total_ns: int) -> Iterator[Finding]:
    api = ctx.trace.cuda_api
    calls = steady(api.loc[name_in(api["name"], SYNC_COPY_APIS)], ctx)
    ops = ctx.a.ops
    copies = ops.loc[ops["op"].isin(["memcpy", "memset"]).to_numpy() & name_in(ops["api_name"], SYNC_COPY_APIS)]
    w = ctx.window
    copies = copies.loc[(copies["api_start_ns"] < w.end_ns) & (copies["api_end_ns"] > w.start_ns)]
    if len(calls) == 0 or len(copies) == 0:
        return
    gpu = int(copies["dur_ns"].sum())
    host = int(calls["dur_ns"].sum())
    if host < min_total_ns:
        return
    # made asynchronous (from pinned memory), a copy lets its thread go on to prepare the next work
    # while it runs: the GPU idle right after each blocking copy hides behind the pinned copy's time.
    # Copies to the host are left out: the host waits for their data either way.
    lead = copies.loc[(copies["kind"].astype(str) != "DtoH").to_numpy()]
    save = np.minimum(_idle_after(ctx, lead), _pinned_time(ctx, lead))
    cs, ce = iv.clip(lead["end_ns"].to_numpy(), lead["end_ns"].to_numpy() + save, w.start_ns, w.end_ns)
    impact = int((ce - cs).sum())
    note = (f" The GPU then idled {fmt_ns(impact)} right after the host-to-device copies and memsets while their "
            "thread prepared the next work, which an asynchronous copy would have let it do during the copy."
            if impact else "")
    names = ", ".join(sorted(calls["name"].astype(str).unique()))
    yield finding(ctx, "sync-memcpy", severity=Severity.WARNING, impact_ns=impact, suggestion=advice(ctx.program),
                  claims=claims_of(cs, ce),
                  message=f"{len(calls)} blocking calls ({names}) held the host for {fmt_ns(host)}; their copies ran "
                          f"{fmt_ns(gpu)} on the GPU with nothing else to overlap." + note
                          + call_sites(ctx, calls["name"].astype(str).unique()),
                  evidence=top_records(calls.assign(name=calls["name"].astype(str)), "dur_ns", 10,
                                       ["name", "start_ns", "dur_ns", "tid"]))


ADVICE = Advice(
    torch=("Make the copies asynchronous: ``tensor.to(device, non_blocking=True)`` from pinned host memory, and "
           "read results back once per several steps instead of each step (``.item()``, ``.cpu()``, ``.tolist()`` "
           "and printing a CUDA tensor each wait for the GPU)."),
    jax=("Let JAX's dispatch stay asynchronous: transfer with ``jax.device_put`` ahead of use and read results "
         "(``np.asarray``, ``float(x)``, ``.block_until_ready()``) once per several steps, not each step."),
    cupy=("Copy asynchronously: ``cupy_array.set(host, stream=s)`` / ``cupy_array.get(stream=s)`` with pinned "
          "host arrays (``cupyx.empty_pinned``) on a non-default stream, and synchronize that stream once per "
          "batch."),
    openacc=("Make the transfers asynchronous: ``async(q)`` on the ``update``/data and compute constructs "
             "(``#pragma acc update device(a) async(1)``, ``#pragma acc parallel loop async(1)``) and one "
             "``#pragma acc wait`` "
             "where the host needs the results; keep arrays resident with a data region so fewer copies happen."),
    openmp=("Make the transfers asynchronous: ``nowait`` on ``target update``/``target`` constructs with "
            "``depend`` clauses and one ``#pragma omp taskwait`` where the host needs the results; keep arrays "
            "resident with ``target data`` so fewer copies happen."),
    default=("Use cudaMemcpyAsync/cudaMemsetAsync on a non-default stream with pinned host memory "
             "(cudaMallocHost), and synchronize once per batch with an event (cudaEventRecord + "
             "cudaStreamWaitEvent/cudaEventSynchronize)."))


def advice(p: Program) -> str:
    """Asynchronous copies in the program's terms."""
    return choose(ADVICE, p)


def _idle_after(ctx: RuleContext, ops: pd.DataFrame) -> np.ndarray:
    """Per op, how long its device stayed idle after the op ended (0 when other work kept it busy)."""
    out = np.zeros(len(ops), dtype=np.int64)
    end, dev = ops["end_ns"].to_numpy(), ops["device_id"].to_numpy()
    for d in np.unique(dev).tolist():
        busy = ctx.a.busy.per_dev.get(d, {}).get("all") if ctx.a.busy is not None else None
        if busy is None or len(busy[0]) == 0:
            continue
        ms, me = busy
        sel = np.flatnonzero(dev == d)
        i = np.searchsorted(ms, end[sel], side="right") - 1  # the busy interval the op ends in
        ok = (i >= 0) & (i + 1 < len(ms))
        i = np.clip(i, 0, len(ms) - 1)
        last = me[i] <= end[sel]  # nothing else ran on past the op's end
        nxt = ms[np.clip(i + 1, 0, len(ms) - 1)]
        out[sel] = np.where(ok & last, nxt - end[sel], 0)
    return out


def _pinned_time(ctx: RuleContext, ops: pd.DataFrame) -> np.ndarray:
    """Per op, its time were it a copy from pinned memory (``_copy_rates``); memsets as they ran."""
    m = ctx.trace.memcpy
    keys = pack_keys(m["pid"].to_numpy(), m["correlation_id"].to_numpy())
    order = np.argsort(keys, kind="stable")
    mine = pack_keys(ops["pid"].to_numpy(), ops["correlation_id"].to_numpy())
    at = np.clip(np.searchsorted(keys[order], mine), 0, max(len(order) - 1, 0))
    found = (len(order) > 0) & (keys[order][at] == mine) if len(order) else np.zeros(len(ops), dtype=bool)
    host_mem = np.where(found, m["host_mem"].astype(str).to_numpy()[order][at] if len(order) else "", "")
    rows = pd.DataFrame({"kind": ops["kind"].astype(str).to_numpy(), "host_mem": host_mem,
                         "bytes": ops["bytes"].to_numpy(), "dur_ns": ops["dur_ns"].to_numpy(),
                         "device_id": ops["device_id"].to_numpy()})
    return pinned_durations(ctx, rows, ASSUMED_SPEEDUP)
