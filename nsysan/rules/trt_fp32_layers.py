"""TensorRT layers run FP32/TF32 convolutions and GEMMs on a GPU with faster reduced-precision paths.

**Why it matters**: an engine built without reduced-precision flags runs every layer in FP32 (TF32
on Ampere and newer); tensor cores run FP16/BF16 at about twice the TF32 rate, INT8/FP8 at twice
that again, and halve the memory traffic between layers.

**Fix**: build the engine with reduced precision: ``trtexec --fp16`` (or ``--bf16``; ``--int8`` /
``--fp8`` with calibration or a quantized ONNX model: check accuracy), in the API
``config.set_flag(trt.BuilderFlag.FP16)``; keep FP32 only on the layers that need it
(``layer.precision`` with ``OBEY_PRECISION_CONSTRAINTS``) and feed FP16 inputs to avoid
reformats at the boundary.

Precision comes from the names of the kernels each layer launched (``analyses/tensorrt.py``:
``f32f32``/``sgemm``/``tf32`` vs ``f16``/``h16816``/``i8``...); heavy kernels are convolutions and
GEMMs. Fires when those FP32/TF32 kernels take at least ``min_share`` of the steady-state TensorRT
executions' GPU time, on a GPU of compute capability ``min_compute_major`` or newer. Impact:
``assumed_saving_frac`` of their GPU time (the 2x tensor-core ratio, discounted), claimed on those
kernels. The general ``fp32-compute`` rule leaves kernels launched inside TensorRT executions to
this one, so the same kernels are never counted twice.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule, top_records
from nsysan.units import fmt_ns, fmt_pct


@rule("trt-fp32-layers", "TensorRT layers run in FP32/TF32", min_share=0.2, assumed_saving_frac=0.5,
      min_compute_major=7)
def check(ctx: RuleContext, *, min_share: float, assumed_saving_frac: float,
          min_compute_major: int) -> Iterator[Finding]:
    tr = ctx.a.tensorrt
    if tr is None or not tr.found or not tr.gpu_recorded or len(tr.ops) == 0:
        return
    major = ctx.trace.gpus["compute_major"].dropna()
    if len(major) and int(major.max()) < min_compute_major:
        return
    ex = tr.executions.loc[tr.executions["steady"]]
    total = int(ex["gpu_ns"].sum())
    ops = tr.ops.loc[np.isin(tr.ops["exec_id"].to_numpy(), ex["exec_id"].to_numpy())]
    bad = ops.loc[ops["heavy"].to_numpy() & ops["precision"].isin(["fp32", "tf32"]).to_numpy()]
    t32 = int(bad["dur_ns"].sum())
    if total <= 0 or t32 < min_share * total:
        return
    ly = tr.layers
    rows = bad["layer_row"].to_numpy()
    names = np.where(rows >= 0, ly["layer"].to_numpy()[np.maximum(rows, 0)], "(outside layer ranges)")
    by = (bad.assign(layer=names).groupby(["layer", "precision"], sort=True)
          .agg(kernels=("dur_ns", "size"), fp32_gpu_ns=("dur_ns", "sum")).reset_index())
    gpus = ", ".join(ctx.trace.gpus["name"].astype(str).unique())
    steady = ctx.window.adjective
    yield finding(ctx, "trt-fp32-layers", severity=Severity.WARNING, impact_ns=int(t32 * assumed_saving_frac),
                  claims=claims_of(bad["start_ns"], bad["end_ns"]),
                  message=f"{by['layer'].nunique()} TensorRT layers ran FP32/TF32 convolution or GEMM kernels for "
                          f"{fmt_ns(t32)}, {fmt_pct(t32 / total)} of the {len(ex)} {steady}executions' GPU time "
                          f"({fmt_ns(total)}). GPU: {gpus}.",
                  evidence=top_records(by.assign(layer=by["layer"].str.slice(0, 160)), "fp32_gpu_ns", 10))
