"""Heavy convolution/GEMM kernels run in FP32/TF32 on a GPU with faster reduced-precision paths.

**Why it matters**: tensor cores run FP16/BF16 at about twice the TF32 rate (and INT8/FP8 at twice
that again) on Volta and newer GPUs, and halve the memory traffic of activations.

**Fix**: compute in reduced precision, in the program's own terms (as recognised in the trace): a
training loop in mixed precision (PyTorch ``torch.autocast("cuda", dtype=torch.bfloat16)`` and TF32
matmuls, ``torch.set_float32_matmul_precision("high")``; JAX BF16 compute dtypes,
``jax.default_matmul_precision``); inference with TensorRT built with ``BuilderFlag.FP16`` (INT8/FP8
with calibration), in PyTorch ``model.half()``; C/C++ through cuBLAS/cuDNN tensor-op math modes
and ``__half``/``__nv_bfloat16`` operands. Check accuracy.

Kernels are classified by name (``f32``/``sgemm``/``tf32``/``float`` vs ``f16``/``h884``/
``bf16``/``half``/``i8``/``fp8``). Impact: ``assumed_saving_frac`` of the wall-clock time during
which FP32 conv/GEMM kernels ran in the steady state (the documented 2x tensor-core ratio, discounted
to 0.5 x that time; wall-clock, so kernels running at once on several GPUs or streams, which would
all get faster together, count once), claimed on that time. Kernels launched inside TensorRT engine executions are
left to ``trt-fp32-layers`` (per layer), so no kernel is judged twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import category_mask
from nsysan.analyses.join import pack_keys
from nsysan.analyses.program import Program
from nsysan.rules._advice import CUBLAS_TF32, CUDNN_TENSOR_OPS, TORCH_BF16, TORCH_FP16, TORCH_TF32, Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule, top_records
from nsysan.units import fmt_ns, fmt_pct

HEAVY = re.compile(r"conv|gemm|xmma|fprop|dgrad|wgrad|cutlass|implicit|winograd|cudnn::cnn|sm\d+_", re.I)
REDUCED = re.compile(r"f16|fp16|h884|h1688|h16816|hmma|bf16|half|__half|\bi8|int8|imma|fp8|e4m3|e5m2|s8", re.I)
FP32 = re.compile(r"f32|fp32|sgemm|tf32|float|s1688|s884|ffma|scudnn", re.I)


@rule("fp32-compute", "Convolutions/GEMMs run in FP32", min_share=0.2, assumed_saving_frac=0.5, min_compute_major=7)
def check(ctx: RuleContext, *, min_share: float, assumed_saving_frac: float,
          min_compute_major: int) -> Iterator[Finding]:
    k = ctx.trace.kernels
    w = ctx.window
    in_w = (k["start_ns"].to_numpy() < w.end_ns) & (k["end_ns"].to_numpy() > w.start_ns)
    if not in_w.any():
        return
    gpus = ctx.trace.gpus
    major = gpus["compute_major"].dropna()
    if len(major) and int(major.max()) < min_compute_major:
        return
    heavy = category_mask(k["name"], lambda s: bool(HEAVY.search(s)))
    reduced = category_mask(k["name"], lambda s: bool(REDUCED.search(s)))
    fp32 = category_mask(k["name"], lambda s: bool(FP32.search(s))) & heavy & ~reduced & in_w
    trt = ctx.a.tensorrt
    if trt is not None and len(trt.ops):  # kernels of TensorRT executions: judged by trt-fp32-layers
        fp32 &= ~np.isin(pack_keys(k["pid"].to_numpy(), k["correlation_id"].to_numpy()),
                         pack_keys(trt.ops["pid"].to_numpy(), trt.ops["correlation_id"].to_numpy()))
    dur = k["dur_ns"].to_numpy()
    total = int(dur[in_w].sum())
    f = k.loc[fp32]
    t32 = int(f["dur_ns"].sum())
    if total == 0 or t32 < min_share * total:
        return
    share_reduced = float(dur[heavy & reduced & in_w].sum()) / total
    by = f.groupby(f["name"].astype(str), observed=True)["dur_ns"].agg(["count", "sum"]).reset_index().rename(
        columns={"name": "name", "count": "count", "sum": "total_ns"})
    wall = iv.total(*iv.merge(f["start_ns"].to_numpy(), f["end_ns"].to_numpy()))
    yield finding(ctx, "fp32-compute", severity=Severity.WARNING, impact_ns=int(wall * assumed_saving_frac),
                  claims=claims_of(f["start_ns"], f["end_ns"]),
                  suggestion=advice(ctx.program),
                  message=f"FP32/TF32 convolution and GEMM kernels took {fmt_ns(t32)} ({fmt_pct(t32 / total)} of kernel "
                          f"time in the {w.label}); reduced-precision ones {fmt_pct(share_reduced)}. "
                          f"GPU: {', '.join(gpus['name'].astype(str).unique())}.",
                  evidence=top_records(by.assign(name=by["name"].str.slice(0, 160)), "total_ns", 10))


TRT_FIX = ("Run inference in reduced precision: build the TensorRT engine with "
           "``config.set_flag(trt.BuilderFlag.FP16)`` (``trtexec --fp16``; INT8/FP8 with calibration or a "
           "quantized model); the FP32 kernels outside the engine: {outside} Check accuracy.")
ADVICE = Advice(
    torch_training=("Train in mixed precision: wrap the forward pass and the loss in "
                    f"{TORCH_BF16} (BF16 needs no loss scaling; with FP16 use "
                    "``torch.amp.GradScaler``), keeping the FP32 weights and optimizer state; let the remaining FP32 "
                    f"matmuls and convolutions use TF32 ({TORCH_TF32}, "
                    "``torch.backends.cudnn.allow_tf32 = True``). Check convergence against an FP32 run."),
    jax_training=("Train in mixed precision: keep FP32 parameters (``param_dtype=jnp.float32``) and compute in BF16 "
                  "(Flax ``dtype=jnp.bfloat16``, or cast params and inputs with ``jnp.bfloat16`` inside the step), and "
                  "let the remaining FP32 matmuls use TF32/BF16 passes: "
                  "``jax.default_matmul_precision(\"tensorfloat32\")`` "
                  "(or the ``jax_default_matmul_precision`` config). Check convergence against an FP32 run."),
    torch_tensorrt=TRT_FIX.format(outside=f"``model.half()`` or {TORCH_FP16} under ``torch.inference_mode()``."),
    tensorrt=TRT_FIX.format(outside="FP16 operands in cuBLAS/cuDNN calls."),
    torch_inference=("Run inference in reduced precision: ``model.half()`` (or ``model.to(torch.bfloat16)``) "
                     f"with FP16 inputs, or {TORCH_FP16} under ``torch.inference_mode()``; at "
                     f"least TF32 for what stays FP32 ({TORCH_TF32}). Check accuracy."),
    torch=(f"Use reduced precision: {TORCH_BF16} around the forward pass "
           "(training: keep FP32 weights and optimizer state; inference: or ``model.half()``), and TF32 for "
           f"what stays FP32 ({TORCH_TF32}). Check accuracy."),
    jax=("Compute in BF16: ``jnp.bfloat16`` parameters and inputs for inference (FP32 parameters with BF16 "
         "compute when training), or TF32/BF16 matmul passes with "
         "``jax.default_matmul_precision(\"tensorfloat32\")``. "
         "Check accuracy."),
    cupy=("Compute in reduced precision: ``cupy.float16`` arrays for the matmuls (cuBLAS then runs them on the "
          "tensor cores), or allow TF32 with ``CUPY_TF32=1``. Check accuracy."),
    default=(f"Let cuBLAS and cuDNN use the tensor cores: {CUBLAS_TF32} "
             "(or ``cublasGemmEx``/``cublasLtMatmul`` with ``CUBLAS_COMPUTE_32F_FAST_TF32``), "
             f"{CUDNN_TENSOR_OPS}; better, store the "
             "operands as ``__half``/``__nv_bfloat16`` and accumulate in FP32 (``cublasGemmEx`` with ``CUDA_R_16BF`` "
             "inputs, ``CUBLAS_COMPUTE_32F``); hand-written kernels through WMMA/``mma.sync`` or CUTLASS. "
             "Check accuracy."),
    # training first, then TensorRT's builder flags before PyTorch's or JAX's inference words
    first=("torch_training", "jax_training", "torch_tensorrt", "tensorrt"))


def advice(p: Program) -> str:
    """The fix in the program's terms: training gets mixed precision, inference reduced-precision
    weights or TensorRT's builder flags, code without a framework cuBLAS/cuDNN math modes."""
    return choose(ADVICE, p)
