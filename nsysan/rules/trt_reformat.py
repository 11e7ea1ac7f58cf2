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
or by kernels (every op a format-conversion kernel). Fires when their GPU time is at least
``min_share`` of the executions' GPU time. Impact: their GPU time (removing the conversion
removes the copy), claimed on those kernels' wall-clock time, so no other rule counts it again.
Without GPU activity in the trace the share is measured on the CPU side (the layer ranges'
host time) and the impact is 0: the GPU time was not recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.tensorrt import layer_is_reformat
from nsysan.rules._base import Finding, Severity, claims_of, finding, rule, top_records
from nsysan.units import fmt_ns, fmt_pct


@rule("trt-reformat", "TensorRT reformatting layers take a share of each execution", min_share=0.05)
def check(ctx: Any, *, min_share: float) -> Iterator[Finding]:
    tr = ctx.a.tensorrt
    if tr is None or not tr.found or len(tr.layers) == 0:
        return
    ex = tr.executions.loc[tr.executions["steady"] & ~tr.executions["captured"]]
    if len(ex) == 0:
        return
    ly = tr.layers.loc[np.isin(tr.layers["exec_id"].to_numpy(), ex["exec_id"].to_numpy())]
    ref = layer_is_reformat(ly)
    gpu = tr.gpu_recorded and int(ex["gpu_ns"].sum()) > 0
    col, total = ("gpu_ns", int(ex["gpu_ns"].sum())) if gpu else ("cpu_ns", int(ex["cpu_ns"].sum()))
    part = int(ly.loc[ref, col].sum())
    if total <= 0 or part < min_share * total:
        return
    r = ly.loc[ref]
    by = (r.groupby("layer", sort=True).agg(count=("cpu_ns", "size"), gpu_total_ns=("gpu_ns", "sum"),
                                            cpu_total_ns=("cpu_ns", "sum")).reset_index())
    n_per = len(r) / max(len(ex), 1)
    if gpu:
        ops = tr.ops.loc[np.isin(tr.ops["layer_row"].to_numpy(), r.index.to_numpy())]
        yield finding(ctx, "trt-reformat", severity=Severity.WARNING, impact_ns=part,
                      claims=claims_of(ops["start_ns"], ops["end_ns"]),
                      message=f"{n_per:.1f} reformatting layers per execution took {fmt_ns(part)} of GPU time, "
                              f"{fmt_pct(part / total)} of the {len(ex)} steady-state TensorRT executions' "
                              f"{fmt_ns(total)}.",
                      evidence=top_records(by.assign(layer=by["layer"].str.slice(0, 160)), "gpu_total_ns", 10))
        return
    yield finding(ctx, "trt-reformat", severity=Severity.INFO, impact_ns=0,
                  message=f"{n_per:.1f} reformatting layers per execution took {fmt_pct(part / total)} of the "
                          f"{len(ex)} TensorRT executions' host time ({fmt_ns(part)} of {fmt_ns(total)}). GPU "
                          f"activity was not recorded, so their device time and the saving cannot be measured.",
                  evidence=top_records(pd.DataFrame(by.assign(layer=by["layer"].str.slice(0, 160))),
                                       "cpu_total_ns", 10))
