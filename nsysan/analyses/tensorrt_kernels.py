"""What a TensorRT layer's kernels are, from their names: precision class, format conversion,
convolution/GEMM (``tensorrt_layers`` says how a layer's precision and reformat follow from them)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nsysan.analyses.frames import category_mask

PRECISIONS = ("", "fp8", "int8", "fp16", "tf32", "fp32")  # class 0: the kernel name does not say
_PREC = [re.compile(p, re.IGNORECASE) for p in (
    r"fp8|e4m3|e5m2",
    r"int8|i8i8|_i8|imma|\bi8",
    r"f16|fp16|h884|h1688|h16816|hmma|bf16|half",
    r"tf32",
    r"f32|fp32|sgemm|scudnn|float|ffma|s884|s1688",
)]
HEAVY = re.compile(r"conv|gemm|xmma|fprop|implicit|winograd|cudnn::cnn|cutlass|matmul", re.IGNORECASE)
REFORMAT_KERNEL = re.compile(r"reformat|permutationKernel|copyPackedKernel|nchwToNhwc|nhwcToNchw", re.IGNORECASE)


def _classes(names: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per op: precision class (index into PRECISIONS), reformat kernel, heavy (conv/GEMM)."""
    def cls(s: str) -> int:
        for i, p in enumerate(_PREC):
            if p.search(s):
                return i + 1
        return 0

    arr = names.array if isinstance(names.array, pd.Categorical) else pd.Categorical(names.astype(str))
    cats = [str(c) for c in arr.categories]
    lut = np.array([cls(c) for c in cats] + [0], dtype=np.int8)
    codes = np.asarray(arr.codes)
    s = pd.Series(arr)
    return (lut[codes], category_mask(s, lambda x: bool(REFORMAT_KERNEL.search(x))),
            category_mask(s, lambda x: bool(HEAVY.search(x))))


def op_classes(sel: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per op of ``sel``: duration, precision class, whether a reformat kernel, whether a heavy kernel."""
    dur = sel["dur_ns"].to_numpy().astype(np.int64) if len(sel) else np.zeros(0, dtype=np.int64)
    prec, refk, heavy = _classes(sel["name"]) if len(sel) else (np.zeros(0, np.int8), np.zeros(0, bool),
                                                                  np.zeros(0, bool))
    is_kernel = (sel["op"].astype(str).to_numpy() == "kernel") if len(sel) else np.zeros(0, bool)
    return dur, prec, refk & is_kernel, heavy & is_kernel
