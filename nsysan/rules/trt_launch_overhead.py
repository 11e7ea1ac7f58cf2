"""Many short TensorRT layers per execution leave the GPU waiting for their launches.

**Why it matters**: ``enqueueV3`` launches every layer's kernels from the host, a few microseconds
each. With many short layers (small batches, small models) the GPU finishes a kernel before the
next one is launched and idles inside every execution: the engine runs at the speed of the
launching thread.

**Fix**: capture ``enqueueV3`` into a CUDA Graph once per input shape and replay it
(``cudaStreamBeginCapture(stream)``, ``context->enqueueV3(stream)``, ``cudaStreamEndCapture``,
``cudaGraphInstantiate``, then ``cudaGraphLaunch`` per batch; ``trtexec --useCudaGraph``; in Python
with cuda-python around ``context.execute_async_v3(stream)``); call ``enqueueV3`` once before
capturing (it may allocate on first use) and re-capture after changing shapes or profiles. Larger
batches or fewer, fused layers also help.

Judged on the steady-state executions that ran GPU work (``analyses/tensorrt.py``): inside each
execution's GPU span, the time when none of its ops ran and the next one had not been launched yet
(its launching call started after the GPU went idle): the GPU waited for the host. Fires when the
executions have at least ``min_layers`` layers (median) and that waiting is at least ``min_frac``
of their GPU span. Impact: the waiting time (what a graph replay removes, an upper bound), claimed
as those intervals, so launch-bound and host-bound-gap never count it again. Executions captured
into a CUDA Graph run no GPU work when traced and are not judged.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule, top_records
from nsysan.units import fmt_ns, fmt_pct


def waiting_gaps(ops: pd.DataFrame) -> pd.DataFrame:
    """Per execution, the intervals inside its GPU span when none of its ops ran and the next op's
    launching call started after the previous ones ended. Columns: exec_id, start_ns, end_ns."""
    if len(ops) == 0:
        return pd.DataFrame({"exec_id": [], "start_ns": [], "end_ns": []}, dtype="int64")
    o = ops.sort_values(["exec_id", "start_ns"], kind="stable")
    ex = o["exec_id"].to_numpy()
    run_end = o.groupby("exec_id", sort=False)["end_ns"].cummax().to_numpy()
    prev = np.r_[-1, run_end[:-1]]
    same = np.r_[False, ex[1:] == ex[:-1]]
    start = o["start_ns"].to_numpy()
    wait = same & (start > prev) & (o["api_start_ns"].to_numpy() >= prev)
    return pd.DataFrame({"exec_id": ex[wait], "start_ns": prev[wait], "end_ns": start[wait]})


@rule("trt-launch-overhead", "TensorRT executions wait for layer launches", min_layers=20, min_frac=0.1)
def check(ctx: RuleContext, *, min_layers: int, min_frac: float) -> Iterator[Finding]:
    tr = ctx.a.tensorrt
    if tr is None or not tr.found or not tr.gpu_recorded:
        return
    ex = tr.executions.loc[tr.executions["steady"] & ~tr.executions["captured"] & (tr.executions["gpu_ops"] > 0)]
    if len(ex) == 0 or float(np.median(ex["layers"].to_numpy())) < min_layers:
        return
    ops = tr.ops.loc[np.isin(tr.ops["exec_id"].to_numpy(), ex["exec_id"].to_numpy())]
    w = waiting_gaps(ops)
    span = int((ex["proj_end_ns"] - ex["proj_start_ns"]).sum())
    waited = int((w["end_ns"] - w["start_ns"]).sum())
    if span <= 0 or waited < min_frac * span:
        return
    waited_per = (w.assign(d=w["end_ns"] - w["start_ns"]).groupby("exec_id")["d"].sum()
                  .reindex(ex["exec_id"].to_numpy()).fillna(0).astype("int64").to_numpy())
    per = ex.assign(waited_ns=waited_per, span_ns=ex["proj_end_ns"] - ex["proj_start_ns"])
    layer_gpu = tr.layers.loc[np.isin(tr.layers["exec_id"].to_numpy(), ex["exec_id"].to_numpy()), "gpu_ns"]
    med_layer = int(np.median(layer_gpu.loc[layer_gpu > 0])) if (layer_gpu > 0).any() else 0
    steady = ctx.window.adjective
    yield finding(ctx, "trt-launch-overhead", severity=Severity.WARNING, impact_ns=waited,
                  claims=claims_of(w["start_ns"], w["end_ns"]),
                  message=f"{len(ex)} {steady}TensorRT executions of {int(np.median(ex['layers']))} layers each "
                          f"(median layer GPU time {fmt_ns(med_layer)}) left the GPU waiting for the next launch "
                          f"{fmt_ns(waited)} in all, {fmt_pct(waited / span)} of their GPU span ({len(w)} waits, "
                          f"{fmt_ns(waited / len(ex))} per execution).",
                  evidence=top_records(per[["exec_id", "engine", "layers", "span_ns", "waited_ns", "start_ns"]],
                                       "waited_ns", 10))
