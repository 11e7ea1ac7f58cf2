"""Optimizers that loop over parameters (issue 49 item 2), on hand-built launches whose numbers are
the test's own: 3 iterations of 20 forward, 20 backward kernels, then an optimizer step over 200
parameters, 4 small element-wise kernels each (``foreach=False``), or 3 ``multi_tensor_apply``
kernels (``fused=True``)."""

from __future__ import annotations

import factories as F
import numpy as np
import pandas as pd

from nsysan.analyses.optimizer import per_parameter_optimizer
from nsysan.rules.launch_bound import OPTIMIZER_FIX

PARAMS, PER_PARAM, ITERS = 200, 4, 3
EW = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>(int, T1, T2)"
FWD, BWD = "ampere_sgemm_128x64_nn", "void at::native::elementwise_kernel_backward_gelu"
FUSED = "void at::native::multi_tensor_apply_kernel<FusedOptimizerTensorListMetadata<4>, FusedAdamMathFunctor>"


def _build(fused: bool) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    rows, ranges, its = [], [], []
    t = 1_000_000
    for i in range(ITERS):
        s = t
        for name in [FWD] * 20 + [BWD] * 20:
            rows.append((name, t, 30_000))
            t += 40_000
        o = t
        step = [FUSED] * 3 if fused else [EW] * (PARAMS * PER_PARAM)
        for name in step:
            rows.append((name, t, 2_000))
            t += 6_000
        ranges.append((o - 1, t + 1, "optimizer"))
        t += 10_000
        its.append((s - 10, t))
        ranges.append((s - 10, t, "train_step"))
    lau = pd.DataFrame({"name": pd.Categorical([r[0] for r in rows]),
                        "api_start_ns": np.array([r[1] for r in rows], np.int64),
                        "gpu_ns": np.array([r[2] for r in rows], np.int64),
                        "pid": F.PID, "tid": F.PID, "is_graph": False})
    iters = pd.DataFrame({"pid": F.PID, "tid": F.PID, "start_ns": [s for s, _ in its], "end_ns": [e for _, e in its]})
    return lau, F.nvtx(ranges), iters


def test_a_per_parameter_optimizer_is_recognised_in_its_nvtx_range():
    lau, nv, its = _build(fused=False)
    got = per_parameter_optimizer(lau, nv, its)
    assert got is not None and got.part == "NVTX range 'optimizer'"
    assert got.iterations == ITERS and got.kernels == PARAMS * PER_PARAM
    assert got.gpu_ns == PARAMS * PER_PARAM * 2_000


def test_without_nvtx_the_launches_after_the_last_backward_kernel_are_the_optimizer():
    lau, nv, its = _build(fused=False)
    got = per_parameter_optimizer(lau, nv.iloc[0:0], its)
    assert got is not None and got.part == "after the last backward kernel" and got.kernels == PARAMS * PER_PARAM


def test_a_fused_optimizer_is_not_a_loop():
    lau, nv, its = _build(fused=True)
    assert per_parameter_optimizer(lau, nv, its) is None
    assert per_parameter_optimizer(lau, nv.iloc[0:0], its) is None


def test_the_fix_is_the_optimizer_flag():
    assert "fused=True" in OPTIMIZER_FIX and "foreach=True" in OPTIMIZER_FIX and "FusedAdam" in OPTIMIZER_FIX
