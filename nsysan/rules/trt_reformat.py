"""TensorRT reformatting layers take a large share of each engine execution.

**Why it matters**: TensorRT inserts a reformatting layer (``Reformatting CopyNode for Input
Tensor 0 to ...``, or an ``Identity`` cast) wherever a tensor's layout or precision does not match
what the next layer's chosen kernel reads: at the engine's inputs and outputs, at mixed-precision
boundaries and around plugins. Each one reads and writes the whole tensor and does no useful math.

**Fix**: give the engine inputs and outputs in the formats its first and last layers want
(``trtexec --inputIOFormats=fp16:chw --outputIOFormats=fp16:chw``; in the API
``tensor.dtype``/``tensor.allowed_formats`` on the network inputs and outputs), and avoid
precision boundaries between neighbouring layers (one precision for a block rather than per-layer
``layer.precision`` constraints, ``OBEY_PRECISION_CONSTRAINTS`` only where accuracy needs it);
check the remaining ones with ``trtexec --dumpLayerInfo`` or TREx.

Judged on the steady-state engine executions (``analyses/tensorrt.py``): reformat layers by name
or by kernels (every op a format-conversion kernel). Fires for each engine whose reformat layers
take at least ``min_share`` of its executions' GPU time. Impact: their GPU time (removing the conversion
removes the copy), claimed on those kernels' wall-clock time, so no other rule counts it again.
Without GPU activity in the trace the share is measured on the CPU side (the layer ranges'
host time) and the impact is 0: the GPU time was not recorded.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from nsysan.analyses.tensorrt_layers import layer_is_reformat
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule, top_records
from nsysan.units import fmt_ns, fmt_pct


@rule("trt-reformat", "TensorRT reformatting layers take a share of each execution", min_share=0.05)
def check(ctx: RuleContext, *, min_share: float) -> Iterator[Finding]:
    tr = ctx.a.tensorrt
    if tr is None or not tr.found or len(tr.layers) == 0:
        return
    ex = tr.executions.loc[tr.executions["steady"] & ~tr.executions["captured"]]
    if len(ex) == 0:
        return
    ly = tr.layers.loc[np.isin(tr.layers["exec_id"].to_numpy(), ex["exec_id"].to_numpy())]
    ref = layer_is_reformat(ly)
    gpu = tr.gpu_recorded and int(ex["gpu_ns"].sum()) > 0
    col = "gpu_ns" if gpu else "cpu_ns"
    total = ex.groupby("engine", sort=True)[col].sum()
    part = ly.loc[ref].groupby("engine", sort=True)[col].sum().reindex(total.index).fillna(0)
    share = part / total.where(total > 0)
    hit = share.index[share.fillna(0).to_numpy() >= min_share].tolist()
    if not hit:
        return
    r = ly.loc[ref & ly["engine"].isin(hit).to_numpy()]
    ex_hit = ex.loc[ex["engine"].isin(hit)]
    by = (r.groupby(["engine", "layer"], sort=True).agg(count=("cpu_ns", "size"), gpu_total_ns=("gpu_ns", "sum"),
                                                        cpu_total_ns=("cpu_ns", "sum")).reset_index())
    by = by.assign(layer=by["layer"].str.slice(0, 160))
    got, of = int(part.loc[hit].sum()), int(total.loc[hit].sum())
    per_engine = "; ".join(f"engine {e}: {fmt_pct(float(share.loc[e]))}" for e in hit)
    n_per = len(r) / max(len(ex_hit), 1)
    if gpu:
        steady = ctx.window.adjective
        ops = tr.ops.loc[np.isin(tr.ops["layer_row"].to_numpy(), r.index.to_numpy())]
        yield finding(ctx, "trt-reformat", severity=Severity.WARNING, impact_ns=got,
                      claims=claims_of(ops["start_ns"], ops["end_ns"]),
                      message=f"{n_per:.1f} reformatting layers per execution took {fmt_ns(got)} of GPU time, "
                              f"{fmt_pct(got / of)} of {len(ex_hit)} {steady}TensorRT executions' {fmt_ns(of)} "
                              f"({per_engine}).",
                      evidence=top_records(by, "gpu_total_ns", 10))
        return
    yield finding(ctx, "trt-reformat", severity=Severity.INFO, impact_ns=0,
                  message=f"{n_per:.1f} reformatting layers per execution took {fmt_pct(got / of)} of {len(ex_hit)} "
                          f"TensorRT executions' host time ({fmt_ns(got)} of {fmt_ns(of)}; {per_engine}). GPU "
                          f"activity was not recorded, so their device time and the saving cannot be measured.",
                  evidence=top_records(pd.DataFrame(by), "cpu_total_ns", 10))
