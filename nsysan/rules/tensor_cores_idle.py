"""GEMM/convolution kernels keep the SMs busy while the tensor cores sit idle (GPU metrics).

**Why it matters**: a matrix multiply in plain FP32 runs on the CUDA cores; the same GEMM in TF32 or
BF16/FP16 (FP8 on Hopper) runs on the tensor cores, several times faster (A100/H100: TF32 tensor
throughput is about 7x plain FP32, BF16 twice TF32).

**Fix**: let the GEMMs use the tensor cores, in the program's own terms (as recognised in the trace):
TF32 for FP32 models (``torch.set_float32_matmul_precision("high")``, JAX
``jax.default_matmul_precision("tensorfloat32")``, cuBLAS ``CUBLAS_TF32_TENSOR_OP_MATH``), or BF16/FP16
(``torch.autocast("cuda", dtype=torch.bfloat16)`` in training, half-precision weights or TensorRT's
``BuilderFlag.FP16`` in inference), or FP8 with Transformer Engine on Hopper; check accuracy.

Measured, not guessed from names: the GPU metric samples taken while each GEMM/convolution kernel
(``analyses/metrics.MATMUL``) ran in the steady state (samples whose period lies inside the kernels)
show tensor active under ``max_tensor_pct`` with SMs active at least ``min_sm_pct``; at least
``min_samples`` samples per kernel and ``min_share`` of the steady window's kernel time. Impact:
``assumed_saving_frac`` of the wall-clock time those kernels ran (the tensor-core rate is several
times the FP32 rate; counted as 2x, as ``fp32-compute`` counts), claimed on those kernels. It is
allocated before ``fp32-compute`` (``precedence``), on the same kernels' time: no nanosecond is
counted twice. The two fixes compose as the shared budget composes partial fixes (``rules``): TF32
halves the kernels' time (counted here), BF16 then halves what is left, and ``fp32-compute`` keeps
only its share of the time this rule has not claimed (on ``metrics_mix``: 40.3 ms here, 20.1 ms
there, of an 80.5 ms FP32 GEMM).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from nsysan.analyses import intervals as iv
from nsysan.analyses.metrics import MATMUL
from nsysan.analyses.program import Program
from nsysan.rules._advice import (
    CUBLAS_TF32,
    CUDNN_TENSOR_OPS,
    TORCH_BF16,
    TORCH_FP16,
    TORCH_HALF,
    TORCH_TF32,
    Advice,
    choose,
)
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule
from nsysan.rules._metric_groups import evidence, group_ops, metric_rows, union
from nsysan.units import fmt_ns, fmt_pct


@rule("tensor-cores-idle", "Tensor cores idle while GEMMs run", max_tensor_pct=5.0, min_sm_pct=50.0, min_samples=20,
      min_share=0.05, assumed_saving_frac=0.5)
def check(ctx: RuleContext, *, max_tensor_pct: float, min_sm_pct: float, min_samples: int, min_share: float,
          assumed_saving_frac: float) -> Iterator[Finding]:
    k = metric_rows(ctx)
    metrics = ctx.a.gpu_metrics
    if len(k) == 0 or metrics is None:  # (no rows without metrics)
        return
    is_mm = np.array([bool(MATMUL.search(str(g))) for g in k["group"]], dtype=bool)
    t, sm = k["tensor_active"].to_numpy(np.float64), k["sm_active"].to_numpy(np.float64)
    hit = k.loc[is_mm & (t < max_tensor_pct) & (sm >= min_sm_pct) & (k["samples"].to_numpy() >= min_samples)]
    w = ctx.window
    for dev, rows in hit.groupby("device_id", sort=True):
        spans = [group_ops(ctx, int(dev), "kernel", str(g)) for g in rows["group"]]
        s, e = union(spans)
        wall = iv.total(s, e)
        compute = metrics.by_kernel
        comp = compute.loc[(compute["device_id"] == dev) & (compute["kind"] == "role") & (compute["group"] == "compute")]
        comp_ns = int(comp["busy_ns"].iloc[0]) if len(comp) else w.dur_ns
        if wall == 0 or wall < min_share * max(comp_ns, 1):
            continue
        mean_t = float(np.average(rows["tensor_active"], weights=rows["samples"]))
        mean_sm = float(np.average(rows["sm_active"], weights=rows["samples"]))
        yield finding(
            ctx, "tensor-cores-idle", severity=Severity.WARNING, impact_ns=int(wall * assumed_saving_frac),
            claims=claims_of(s, e), precedence=1, suggestion=advice(ctx.program),
            message=f"GPU {int(dev)}: {len(rows)} GEMM/convolution kernel(s) ran {fmt_ns(wall)} in the {w.label} "
                    f"({fmt_pct(wall / max(comp_ns, 1))} of its compute time) with the SMs {mean_sm:.0f}% active but the "
                    f"tensor cores {mean_t:.1f}% active ({int(rows['samples'].sum()):,} GPU-metric samples): they run "
                    "on the CUDA cores (plain FP32), not the tensor cores.",
            evidence=evidence(rows.sort_values("busy_ns", ascending=False),
                              ("group", "ops", "busy_ns", "samples", "coverage", "sm_active", "tensor_active",
                               "dram_read", "dram_write")))


TORCH_TF32_FIRST = ("Let the FP32 GEMMs run on the tensor cores in TF32: " + TORCH_TF32 + " "
                    "(``torch.backends.cudnn.allow_tf32 = True`` for convolutions); {then}; FP8 with Transformer "
                    "Engine on Hopper. Check {check}.")
JAX_TF32_FIRST = ("Let the FP32 matmuls use the tensor cores: ``jax.default_matmul_precision(\"tensorfloat32\")`` "
                  "(or ``\"bfloat16\"``); better, compute in BF16 (Flax ``dtype=jnp.bfloat16``{params}). "
                  "Check accuracy.")
ADVICE = Advice(
    torch_training=TORCH_TF32_FIRST.format(
        then=f"then train in mixed precision: {TORCH_BF16} around the forward pass and loss, FP32 weights and "
             "optimizer state kept", check="convergence"),
    torch_inference=TORCH_TF32_FIRST.format(
        then=f"then run in half precision: {TORCH_HALF}, or {TORCH_FP16} under ``torch.inference_mode()``",
        check="accuracy"),
    torch=TORCH_TF32_FIRST.format(then=f"then BF16 with {TORCH_BF16}", check="accuracy"),
    jax_training=JAX_TF32_FIRST.format(params=", ``param_dtype=jnp.float32`` for training"),
    jax=JAX_TF32_FIRST.format(params=""),
    tensorrt=("Build the TensorRT engine with reduced precision: ``config.set_flag(trt.BuilderFlag.FP16)`` "
              "(``trtexec --fp16``; TF32 is on unless ``BuilderFlag.TF32`` was cleared). Check accuracy."),
    cupy=("Let cuBLAS use the tensor cores: ``CUPY_TF32=1`` for FP32 matmuls, or ``cupy.float16`` arrays. "
          "Check accuracy."),
    default=(f"Let the GEMMs use the tensor cores: {CUBLAS_TF32} (or "
             "``CUBLAS_COMPUTE_32F_FAST_TF32`` in ``cublasGemmEx``/``cublasLtMatmul``), "
             f"{CUDNN_TENSOR_OPS}; better, "
             "``__half``/``__nv_bfloat16`` operands with FP32 accumulation; hand-written GEMMs through WMMA/"
             "``mma.sync`` or CUTLASS. Check accuracy."))


def advice(p: Program) -> str:
    """TF32 first (no code change beyond a switch), then BF16/FP16, in the program's terms."""
    return choose(ADVICE, p)
