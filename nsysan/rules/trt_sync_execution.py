"""TensorRT engines run with the synchronous ``execute``/``executeV2``.

**Why it matters**: ``executeV2`` (TensorRT's ``ExecutionContext::execute`` range) enqueues the
engine and then blocks the calling thread until the work is done, so the host cannot copy the next
input, queue the next batch or post-process the previous one meanwhile, and the GPU idles for a
round trip after every execution.

**Fix**: use ``enqueueV3`` on a CUDA stream you own (``context.set_tensor_address(...)``, then
``context.execute_async_v3(stream)``), with pinned host buffers and ``cudaMemcpyAsync`` on the same
stream, and synchronize once per batch on an event where the results are needed; with two streams
and two sets of buffers (or two execution contexts) the next batch is queued while this one runs.

Executions are synchronous by their range name (``ExecutionContext::execute``); the blocking
synchronize calls inside them on their thread confirm it (``blocked_ns``, when the CUDA API was
traced). Fires when at least half of the steady-state executions are synchronous. Impact: the GPU
idle gaps that begin when a synchronous execution's GPU work ends, before its call returned: the
round trip ``enqueueV3`` would hide; claimed as those gaps (sync-api and host-bound-gap never
count them again). Without GPU activity in the trace the impact is 0.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule, top_records
from nsysan.units import fmt_ns, fmt_pct


@rule("trt-sync-execution", "TensorRT executions are synchronous (execute/executeV2)", min_frac=0.5)
def check(ctx: RuleContext, *, min_frac: float) -> Iterator[Finding]:
    tr = ctx.a.tensorrt
    if tr is None or not tr.found:
        return
    ex = tr.executions.loc[tr.executions["steady"] & ~tr.executions["captured"]]
    sync = ex.loc[ex["sync"]]
    if len(ex) == 0 or len(sync) < min_frac * len(ex):
        return
    w = ctx.window
    blocked = int(sync["blocked_ns"].sum())
    host = int(sync["cpu_ns"].sum())
    gaps = ctx.a.gaps
    claim_s, claim_e = np.zeros(0, np.int64), np.zeros(0, np.int64)
    if tr.gpu_recorded and len(gaps) and (sync["proj_end_ns"] >= 0).any():
        parts_s, parts_e = [], []
        s = sync.loc[sync["proj_end_ns"] >= 0]
        for dev, d in s.groupby("device_id", sort=True):
            g = gaps.loc[gaps["device_id"] == dev].sort_values("start_ns", kind="stable")
            gs, ge = g["start_ns"].to_numpy(), g["end_ns"].to_numpy()
            i = np.searchsorted(gs, d["proj_end_ns"].to_numpy(), side="left")
            ok = (i < len(gs)) & (gs[np.minimum(i, len(gs) - 1)] <= d["end_ns"].to_numpy()) if len(gs) else i < 0
            parts_s.append(gs[i[ok]])
            parts_e.append(ge[i[ok]])
        if parts_s:
            claim_s, claim_e = iv.clip(np.concatenate(parts_s), np.concatenate(parts_e), w.start_ns, w.end_ns)
    impact = iv.total(claim_s, claim_e) if len(claim_s) else 0
    confirm = (f"; the thread was blocked in synchronize calls inside them for {fmt_ns(blocked)} "
               f"({fmt_pct(blocked / host)} of their {fmt_ns(host)} host time)") if blocked and host else ""
    if not tr.gpu_recorded:
        after = (" GPU activity was not recorded, so the idle time each round trip costs cannot be measured "
                 "(impact 0).")
    elif impact:
        after = f" After their work finished the GPU idled {fmt_ns(impact)} until the next submission."
    else:
        after = " No idle gap of the device follows them inside the analysed window (impact 0)."
    names = ", ".join(sorted(sync["name"].astype(str).unique()))
    ev = sync.nlargest(10, "cpu_ns")[["exec_id", "engine", "name", "cpu_ns", "blocked_ns", "gpu_ns", "start_ns"]]
    yield finding(ctx, "trt-sync-execution", severity=Severity.WARNING if impact else Severity.INFO,
                  impact_ns=int(impact), claims=claims_of(claim_s, claim_e) if impact else None,
                  message=f"{len(sync)} of {len(ex)} TensorRT executions in the {w.label} were synchronous "
                          f"({names}){confirm}.{after}",
                  evidence=top_records(pd.DataFrame(ev), "cpu_ns", 10))
