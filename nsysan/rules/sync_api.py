"""The host spends a large share of the steady state blocked in synchronization calls.

**Why it matters**: while a thread waits in cudaDeviceSynchronize / cudaStreamSynchronize /
cudaEventSynchronize it cannot prepare or submit the next batch; after it returns, the GPU idles
until the next submission (a round trip per iteration). (nsys analyze: cuda_api_sync.)

**Fix**: synchronize only where the host needs results, with events (cudaEventRecord +
cudaEventSynchronize on just that event, or cudaStreamWaitEvent between streams), and queue the next
batch before waiting for the previous one. In the program's own terms (as recognised in the trace):
no per-step ``.item()``/``torch.cuda.synchronize()`` in PyTorch, ``async``/``wait`` in OpenACC.

Fires when synchronization calls cover more than ``min_frac`` of the steady window on one thread.
Impact: the GPU idle time of gaps that directly follow a synchronization call on the submitting
thread (the call returned at most one gap length before the gap opened, or in its first half: a
sync that waits for the GPU's last op returns just after the gap opens) (the measured round-trip cost), claimed as those gaps' wall-clock time, so host-bound-gap
and gpu-low-util never count it again. Silent on traces without GPU activity.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import name_in
from nsysan.analyses.gaps import BLOCKING_SYNC_APIS
from nsysan.analyses.program import Program
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule
from nsysan.rules._window import has_gpu_activity, steady
from nsysan.rules._wording import call_sites
from nsysan.units import fmt_ns, fmt_pct

SYNC = BLOCKING_SYNC_APIS


@rule("sync-api", "Host blocked in synchronization calls", min_frac=0.3)
def check(ctx: RuleContext, *, min_frac: float) -> Iterator[Finding]:
    w = ctx.window
    api = ctx.trace.cuda_api
    s = steady(api.loc[name_in(api["name"], SYNC)], ctx)
    if len(s) == 0 or w.dur_ns == 0 or not has_gpu_activity(ctx):
        return
    per_thread = {}
    for (pid, tid), g in s.groupby(["pid", "tid"]):
        per_thread[(int(pid), int(tid))] = iv.total(*iv.clip(g["start_ns"].to_numpy(), g["end_ns"].to_numpy(),
                                                             w.start_ns, w.end_ns))
    (pid, tid), blocked = max(per_thread.items(), key=lambda kv: kv[1])
    if blocked < min_frac * w.dur_ns:
        return
    gaps = ctx.a.gaps
    g = gaps.loc[(gaps["pid"] == pid) & (gaps["tid"] == tid) & (gaps["start_ns"] >= w.start_ns)
                 & (gaps["end_ns"] <= w.end_ns)]
    ends = np.sort(s.loc[(s["pid"] == pid) & (s["tid"] == tid), "end_ns"].to_numpy())
    impact, claims = 0, None
    if len(g) and len(ends):
        gs, gn = g["start_ns"].to_numpy(), g["gap_ns"].to_numpy()
        # the last sync that returned before the gap's midpoint: a sync waiting for the GPU's last op
        # returns just after the gap opens, so it ends inside the gap, not before it
        i = np.searchsorted(ends, gs + gn // 2, side="right") - 1
        prev_end = np.where(i >= 0, ends[np.clip(i, 0, None)], -1)
        # it returned at most one gap length before the gap, or within the gap's first half: the gap
        # is the round trip after the sync
        after_sync = (prev_end >= 0) & (gs - prev_end <= gn)
        impact = int(g.loc[after_sync, "gap_ns"].sum())
        claims = claims_of(g.loc[after_sync, "start_ns"], g.loc[after_sync, "end_ns"])
    if impact < 0.01 * w.dur_ns:
        return
    names = ", ".join(sorted(s["name"].astype(str).unique()))
    yield finding(ctx, "sync-api", severity=Severity.WARNING,
                  impact_ns=impact, claims=claims, suggestion=advice(ctx.program),
                  message=f"Thread {tid} was blocked in {names} for {fmt_ns(blocked)} ({fmt_pct(blocked / w.dur_ns)} of "
                          f"the {w.label}); the GPU then idled {fmt_ns(impact)} before the next submission."
                          + call_sites(ctx, s["name"].astype(str).unique()),
                  evidence=({"pid": pid, "tid": tid, "blocked_ns": blocked, "calls": int(len(s))},))


ADVICE = Advice(
    torch=("Wait for the GPU only where the host needs a result: drop per-step ``torch.cuda.synchronize()``, and "
           "``.item()``/``.cpu()``/``print(tensor)`` of CUDA tensors (each waits for the GPU); accumulate metrics "
           "on the GPU and read them every N steps; time with ``torch.cuda.Event(enable_timing=True)`` read at "
           "the end."),
    jax=("Wait for the GPU only where the host needs a result: drop per-step ``.block_until_ready()``, "
         "``float(x)`` and ``np.asarray(x)`` of device arrays; read metrics every N steps so JAX's asynchronous "
         "dispatch queues the next step meanwhile."),
    cupy=("Wait for the GPU only where the host needs a result: drop per-step ``stream.synchronize()``/"
          "``cupy.cuda.Device().synchronize()`` and ``.get()``/``float(x)`` of device arrays; use "
          "``cupy.cuda.Event`` and synchronize on it where needed."),
    openacc=("Let the host run ahead: a compute or update construct without ``async`` waits for the GPU at its "
             "end; add ``async(q)`` to them and one ``#pragma acc wait(q)`` where the host needs the results."),
    openmp=("Let the host run ahead: a ``target`` region without ``nowait`` waits for the GPU at its end; add "
            "``nowait`` with ``depend`` clauses and one ``#pragma omp taskwait`` where the host needs the results."),
    default=("Synchronize only where the host needs results, with events (cudaEventRecord + cudaEventSynchronize "
             "on just that event, or cudaStreamWaitEvent between streams), and queue the next batch before waiting "
             "for the previous one."))


def advice(p: Program) -> str:
    """Fewer host waits, in the program's terms."""
    return choose(ADVICE, p)
