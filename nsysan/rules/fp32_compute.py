"""Heavy convolution/GEMM kernels run in FP32/TF32 on a GPU with faster reduced-precision paths.

**Why it matters**: tensor cores run FP16/BF16 at about twice the TF32 rate (and INT8/FP8 at twice
that again) on Volta and newer GPUs, and halve the memory traffic of activations.

**Fix**: run inference in reduced precision: TensorRT ``config.set_flag(trt.BuilderFlag.FP16)``
(or INT8/FP8 with calibration: check accuracy), PyTorch ``model.half()`` /
``torch.autocast("cuda", dtype=torch.float16)``.

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
from typing import Any

import numpy as np

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import category_mask
from nsysan.analyses.join import pack_keys
from nsysan.rules._base import Finding, Severity, claims_of, finding, rule, top_records
from nsysan.units import fmt_ns, fmt_pct

HEAVY = re.compile(r"conv|gemm|xmma|fprop|dgrad|wgrad|cutlass|implicit|winograd|cudnn::cnn|sm\d+_", re.I)
REDUCED = re.compile(r"f16|fp16|h884|h1688|h16816|hmma|bf16|half|__half|\bi8|int8|imma|fp8|e4m3|e5m2|s8", re.I)
FP32 = re.compile(r"f32|fp32|sgemm|tf32|float|s1688|s884|ffma|scudnn", re.I)


@rule("fp32-compute", "Convolutions/GEMMs run in FP32", min_share=0.2, assumed_saving_frac=0.5, min_compute_major=7)
def check(ctx: Any, *, min_share: float, assumed_saving_frac: float, min_compute_major: int) -> Iterator[Finding]:
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
                  message=f"FP32/TF32 convolution and GEMM kernels took {fmt_ns(t32)} ({fmt_pct(t32 / total)} of kernel "
                          f"time in the steady state); reduced-precision ones {fmt_pct(share_reduced)}. "
                          f"GPU: {', '.join(gpus['name'].astype(str).unique())}.",
                  evidence=top_records(by.assign(name=by["name"].str.slice(0, 160)), "total_ns", 10))
