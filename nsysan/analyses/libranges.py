"""Which NVTX ranges come from libraries rather than from the user's own code.

Libraries annotate their internals with NVTX: NCCL (``NCCL`` domain; its network plugin's
``ncclNetRecvTest()`` polls have no domain), CCCL/cub (``CCCL`` domain, ``cub::...``), cuDNN, cuBLAS,
libcudf and cuDF's Python layer, RAPIDS' RMM/RAFT/cuML/cuGraph, TensorRT (per-layer ranges and
``ExecutionContext::...``) and its Myelin runtime, DALI, PyTorch's ``emit_nvtx``/profiler op ranges
(``aten::add``, ``..., seq = 12``), pyprof/DLProf marker dicts (``{'traceMarker': ...}``,
``{'mod': ..., 'op': ...}``), nvFuser's internals, and XLA's module/thunk/compile ranges. These ranges are information
about where time went, never the user's iterations.

``library_of(name, domain)`` names the library (or returns ``None`` for the user's own range);
``library_mask(names, domains)`` is the vectorised form, evaluated once per distinct name.

One kind of library range still tells where an iteration is: XLA's ``XlaModule:#hlo_module=...#``
range around each execution of a compiled (jitted) module. ``xla_module(name, domain)`` says a range
is one (never a compile pass, ``XlaCompile``/``XlaPass``/``XlaEmit``..., nor a ``Thunk``); the
iteration model falls back to it when the program's own ranges are missing (``iterations``).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

# NVTX domains owned by libraries (compared case-insensitively).
LIBRARY_DOMAINS: dict[str, str] = {
    "nccl": "NCCL", "cccl": "CCCL", "cub": "CCCL", "thrust": "CCCL", "cudnn": "cuDNN", "cublas": "cuBLAS",
    "cublaslt": "cuBLAS", "cufft": "cuFFT", "cusparse": "cuSPARSE", "cusolver": "cuSOLVER",
    "libcudf": "cuDF", "cudf_python": "cuDF", "cudf": "cuDF", "rmm": "RMM", "raft": "RAFT", "cuml": "cuML",
    "cugraph": "cuGraph", "libcuml": "cuML", "dask_cuda": "Dask-CUDA", "ucx": "UCX", "ucxx": "UCX",
    "tensorrt": "TensorRT", "myelin": "TensorRT", "myelin-exec": "TensorRT", "dali": "DALI",
    "nvshmem": "NVSHMEM", "pytorch": "PyTorch", "torch": "PyTorch", "xla": "XLA", "jax": "XLA", "tsl": "XLA",
    "cupy": "CuPy", "nvfuser": "nvFuser", "transformer_engine": "Transformer Engine",
    "nemo": "NeMo", "megatron": "Megatron", "apex": "Apex", "triton": "Triton", "onnxruntime": "ONNX Runtime",
}

# Range texts that identify a library whatever their domain (most libraries push into the default one).
_TEXT_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("NCCL", re.compile(r"^(nccl[A-Z]\w*|NCCL[ :])")),
    ("CCCL", re.compile(r"^(cub|thrust)::")),
    ("cuDNN", re.compile(r"^cudnn[A-Z]")),
    ("cuBLAS", re.compile(r"^cublas(Lt)?[A-Z]")),
    ("PyTorch", re.compile(r"^(aten|c10d|prim|cudnn|mkldnn|profiler|torch)::|, (seq|op_id) = \d+|^autograd::")),
    ("PyTorch", re.compile(r"^(ProfilerStep#\d+|Optimizer\.(step|zero_grad)#)")),
    ("pyprof", re.compile(r"^\{'(traceMarker|mod|reprMarkers|callid|seq)'")),
    ("XLA", re.compile(r"^(XlaModule|Thunk|XlaCompile|XlaExecute|XlaPass|XlaEmit|XlaAutotun|xla::|TSL:|"
                       r"jit_\w+\(|PjRt|TfrtCpu|command_buffer_\d+$)")),
    ("TensorRT", re.compile(r"^(ExecutionContext::|IExecutionContext::|Reformatting CopyNode|\{ForeignNode\[|"
                            r"myelin|enqueueV[23]$|executeV2$)")),
    ("cuDF", re.compile(r"^libcudf:")),
    ("RMM", re.compile(r"^rmm::")),
    ("nvFuser", re.compile(r"^(FusionKernelRuntime|FusionExecutorCache|FusionExecutor|FusionCache|FusionContainer|"
                           r"FusionDefinition|Fusion|KernelExecutor|ExprEvalExecutor|ExecutorDispatch|"
                           r"ExecutorRunFusion|GpuLower|ExpressionEvaluator|~?Segmenter|executor_utils|"
                           r"fusion_executor|TransformReplay|IrContainer)(::|\.| copy| clear)|"
                           r"^(registry|transform_replay|executor)\.cpp::|^(getTerminatingOutputs|isResharding)$")),
)


def library_of(name: str, domain: str | None = None) -> str | None:
    """The library that owns an NVTX range, or ``None`` when it looks like the user's own.

    ``name`` is the range's label (nsys shows ``domain:text`` for ranges in a domain); ``domain`` its
    NVTX domain name when known."""
    if domain:
        lib = LIBRARY_DOMAINS.get(domain.strip().lower())
        if lib:
            return lib
        text = name[len(domain) + 1:] if name.startswith(domain + ":") else name
    else:
        text = name
        head, sep, _ = name.partition(":")
        if sep and head and not head.endswith(":"):  # "NCCL:ncclAllReduce" without a domain column
            lib = LIBRARY_DOMAINS.get(head.strip().lower())
            if lib:
                return lib
    for lib, pat in _TEXT_PATTERNS:
        if pat.search(text):
            return lib
    return None


_XLA_MODULE = re.compile(r"^XlaModule:")


def xla_module(name: str, domain: str | None = None) -> bool:
    """The range is XLA's execution of one compiled module (``XlaModule:#hlo_module=jit_step,...#``,
    in nsys' ``TSL`` domain or without one), not a compile pass or a thunk."""
    text = name[len(domain) + 1:] if domain and name.startswith(domain + ":") else name
    if not domain and text.startswith(("TSL:", "XLA:", "xla:", "jax:")):
        text = text.split(":", 1)[1]
    return bool(_XLA_MODULE.match(text)) and library_of(name, domain) == "XLA"


def library_mask(names: pd.Series, domains: pd.Series | None = None) -> np.ndarray:
    """``library_of(...) is not None`` per row, evaluated once per distinct (name, domain)."""
    if len(names) == 0:
        return np.zeros(0, dtype=bool)
    if domains is None:
        domains = pd.Series([None] * len(names), index=names.index)
    key = pd.DataFrame({"n": names.astype(str).to_numpy(), "d": domains.astype(object).to_numpy()})
    codes, uniques = pd.factorize(pd.MultiIndex.from_frame(key.fillna({"d": ""})))
    flags = np.array([library_of(str(n), str(d) or None) is not None for n, d in uniques], dtype=bool)
    return flags[codes]
