"""What program the trace recorded: training or inference, Python or not, and the libraries it ran.

Rules choose their advice by it (``Program``), so a training loop's FP32 GEMMs get mixed-precision
training advice rather than TensorRT builder flags, and a C++ or OpenACC program no PyTorch advice.
Every decision keeps the evidence it rests on (``Program.evidence``), and the report shows it.

Read once per distinct value, never per row (a 2.4M-row API table has a few dozen names):

* **kernel names** (demangled): PyTorch's ``at::native``/``c10``/Inductor ``triton_*`` kernels, cuDNN
  (``cudnn``), cuBLAS (``*gemm*`` of cuBLAS' families: ``sm90_xmma_gemm``, ``ampere_sgemm``,
  ``cublasLt``...), NCCL (``nccl*Kernel``), CuPy (``cupy_*``), OpenACC (``__pgi_uacc_*``, ``main_41_gpu``),
  OpenMP offload (``nvkernel_*_F1L*``, ``__omp_offloading_*``), Julia (``CuDeviceArray``), cuDF
  (``cudf::``, also inside thrust's kernels instantiated with its types); backward-pass
  kernels (``*_backward*``, ``*bwd*``, cuDNN ``dgrad``/``wgrad``, batch norm ``bn_bw``/``bn_fw_tr``) and
  optimizer kernels (``multi_tensor_apply``, ``adam``, ``sgd``...) say training, cuDNN's batch norm
  inference kernels (``bn_fw_inf``) inference;
* **NVTX** (the ``MAX_RANGE_NAMES`` most frequent range names): the domains and range names of
  libraries (``libranges.library_of``: PyTorch, TensorRT, XLA, NCCL, CuPy...), JAX's differentiated
  thunks (``transpose(jvp(...))``: the backward pass) and
  autograd/optimizer ranges (training); the user's own range names (``train_step`` /
  ``infer``, ``predict``, ``decode``, ``request``...); Python sampling domains;
* **TensorRT** engine executions (``analyses/tensorrt.py``): an inference runtime;
* **threads and processes**: PyTorch's autograd engine threads (``pt_autograd_0``: backward ran on
  the GPU), XLA's (``XlaLauncher``, ``py_xla_*``), the profiled processes' names (``python3`` or a
  native binary such as ``./heat``): the processes that have events in the trace, not every process
  the export lists;
* **CUDA API names**: OpenACC's runtime (``acc_*``).

``kind``: "training" when training evidence recurs (``MIN_TRAINING_REPEATS`` backward-pass kernels,
optimizer kernels or training ranges: a test that calls backward once is not a training loop; backward
or optimizer work decides:
a training loop may also hold ``eval`` ranges); else "inference" when inference evidence is present,
or when PyTorch ran at least ``MIN_FORWARD_KERNELS`` kernels with no backward or optimizer kernel
among them (forward passes only); else "unknown". ``python``: True on Python evidence (a Python
process, Python sampling, a Python-only framework), False when the profiled processes are known and
none is Python or the program is compiled directives code (OpenACC/OpenMP, Julia), else None.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from nsysan.analyses.libranges import library_of

if TYPE_CHECKING:
    from nsysan.analyses.tensorrt import TensorRT
    from nsysan.trace.model import Trace

TRAINING, INFERENCE, UNKNOWN = "training", "inference", "unknown"
MIN_FORWARD_KERNELS = 100  # PyTorch kernels without a backward one that make a forward-only program
MIN_TRAINING_REPEATS = 3  # backward kernels, optimizer kernels or training ranges that make a training loop
MAX_RANGE_NAMES = 5_000  # distinct NVTX range names read (the most frequent), so NVTX-heavy traces stay fast

# framework labels (Program.frameworks)
PYTORCH, TENSORRT, XLA, CUPY, CUDNN, CUBLAS, NCCL = "PyTorch", "TensorRT", "JAX/XLA", "CuPy", "cuDNN", "cuBLAS", "NCCL"
OPENACC, OPENMP, JULIA = "OpenACC", "OpenMP offload", "Julia"
CUDF = "cuDF"
# RAPIDS libraries (``libranges`` labels, cuDF also by its kernels): they allocate device memory through RMM
RAPIDS = frozenset({CUDF, "RMM", "cuML", "cuGraph", "RAFT", "Dask-CUDA"})
PYTHON_FRAMEWORKS = frozenset({XLA, CUPY, "cuDF", "pyprof"})  # used from Python only
DIRECTIVES = frozenset({OPENACC, OPENMP})

_KERNEL_LIBS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (PYTORCH, re.compile(r"\bat::native::|\bat::cuda::|\bc10::|^triton_(poi|red|per|tem|mm|bmm)_|"
                         r"\bat_cuda_detail::")),
    (CUDNN, re.compile(r"cudnn", re.I)),
    (CUBLAS, re.compile(r"cublas|^(volta|turing|ampere|ada|hopper|sm\d+)_(s|h|bf16|i8|)?(xmma_)?gemm|"
                        r"^(void )?(gemv2?[NT]?_kernel|gemmSN_|gemmk1_kernel|splitKreduce_kernel)", re.I)),
    (NCCL, re.compile(r"^(void )?nccl\w*(Kernel|_)|ncclDevKernel", re.I)),
    (CUPY, re.compile(r"^cupy_")),
    (OPENACC, re.compile(r"__pgi_uacc_|^\w+_\d+_gpu(__red)?$")),
    (OPENMP, re.compile(r"^nvkernel_\w+_F\d+L\d+_\d+$|__omp_offloading_")),
    (JULIA, re.compile(r"CuDeviceArray<|^julia_")),
    (TENSORRT, re.compile(r"genericReformat::|^(void )?trt_|myelin", re.I)),
)
BACKWARD = re.compile(r"backward|(?<![a-z])bwd|bwd(?![a-z])|dgrad|wgrad|\bbn_bw|bn_fw_tr|_grad_input|"
                      r"_grad_weight|grad_bias|batch_norm_backward|autograd", re.I)
OPTIMIZER = re.compile(r"multi_tensor_apply|fused_?adam|(?<![a-z])(adamw?|sgd|lamb|adagrad|rmsprop|lion)(?![a-z])",
                       re.I)
INFERENCE_KERNELS = re.compile(r"bn_fw_inf|_inference_|fmha.*_inference", re.I)
# NVTX ranges of any owner that say training: JAX's backward pass, autograd and the optimizer step
TRAINING_RANGES = re.compile(r"transpose\(jvp\(|^autograd::|Optimizer\.(step|zero_grad)#|(?<![a-z])backward(?![a-z])|"
                             r"optimizer[._ ]?step|loss\.backward", re.I)
# the user's own range names (library ranges left out)
USER_TRAINING = re.compile(r"(?<![a-z])train(ing)?([_ .-]?(step|iter\w*|loop|epoch|batch|one))?(?![a-z])|"
                           r"(?<![a-z])(fwd_bwd|forward_backward|grad(ient)?s?)(?![a-z])", re.I)
USER_INFERENCE = re.compile(r"(?<![a-z])(infer(ence)?|predict(ion)?|decod(e|ing)|prefill|serv(e|ing)|request)(?![a-z])",
                            re.I)
PYTHON_PROCESS = re.compile(r"(^|/)(python[\d.]*|pypy[\d.]*|ipykernel\w*|jupyter\w*|pytest|torchrun|accelerate)$", re.I)
PYTHON_DOMAINS = re.compile(r"^Python (Periodic Sampling|Backtrace)", re.I)
PYTHON_THREADS = re.compile(r"^(pt_autograd_\d+|py_xla_\w+|pt_main_thread)$")
AUTOGRAD_THREAD = re.compile(r"^pt_autograd_\d+$")
XLA_THREADS = re.compile(r"^(XlaLauncher|py_xla_|tf_XLA)")
OPENACC_API = re.compile(r"^acc_")
CUDF_KERNELS = re.compile(r"\bcudf::")  # libcudf's kernels, or thrust's instantiated with its types


@dataclass(frozen=True, slots=True)
class Program:
    """The program a trace recorded. ``kind``: "training", "inference" or "unknown"; ``python``:
    True, False or None (unknown); ``frameworks``: the libraries and programming models seen
    (``PyTorch``, ``TensorRT``, ``JAX/XLA``, ``CuPy``, ``cuDNN``, ``cuBLAS``, ``NCCL``, ``OpenACC``,
    ``OpenMP offload``, ``Julia``, other NVTX libraries by ``libranges`` name); ``evidence``: for
    "kind", "python" and each framework, what in the trace decided it."""

    kind: str = UNKNOWN
    python: bool | None = None
    frameworks: frozenset[str] = frozenset()
    evidence: Mapping[str, str] = field(default_factory=dict)

    def has(self, *names: str) -> bool:
        return any(n in self.frameworks for n in names)

    @property
    def training(self) -> bool:
        return self.kind == TRAINING

    @property
    def inference(self) -> bool:
        return self.kind == INFERENCE

    @property
    def torch(self) -> bool:
        """PyTorch ran (its kernels, ranges or threads): PyTorch advice applies."""
        return PYTORCH in self.frameworks

    @property
    def jax(self) -> bool:
        return XLA in self.frameworks

    @property
    def tensorrt(self) -> bool:
        return TENSORRT in self.frameworks

    @property
    def cupy(self) -> bool:
        return CUPY in self.frameworks

    @property
    def rapids(self) -> bool:
        """A RAPIDS library ran (cuDF, RMM, cuML, cuGraph, RAFT, Dask-CUDA): device memory comes from RMM."""
        return bool(RAPIDS & self.frameworks)

    @property
    def directives(self) -> str | None:
        """"OpenACC" or "OpenMP offload" for compiled directives code, else None."""
        return OPENACC if OPENACC in self.frameworks else OPENMP if OPENMP in self.frameworks else None

    @property
    def native(self) -> bool:
        """No Python framework whose advice would fit (PyTorch, JAX, CuPy): advice in CUDA C/C++ terms
        (or the directives' own, ``directives``)."""
        return not self.has(PYTORCH, XLA, CUPY)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "python": self.python, "frameworks": sorted(self.frameworks),
                "evidence": {k: self.evidence[k] for k in sorted(self.evidence)}}

    def summary(self) -> str:
        """One line for the report: kind, Python, the frameworks."""
        py = {True: "Python", False: "not Python", None: "Python unknown"}[self.python]
        fw = ", ".join(sorted(self.frameworks)) or "no framework recognised"
        return f"{self.kind}; {py}; {fw}"


UNKNOWN_PROGRAM = Program()


def _distinct(values: Any) -> tuple[list[str], np.ndarray]:
    """Distinct non-missing values of a column as strings, with their row counts (a categorical's
    used categories through its codes; else one factorize)."""
    if values is None or len(values) == 0:
        return [], np.zeros(0, np.int64)
    arr = values.array if isinstance(values, pd.Series) else values
    if isinstance(arr, pd.Categorical):
        codes = np.asarray(arr.codes)
        counts = np.bincount(codes[codes >= 0], minlength=len(arr.categories))
        used = np.flatnonzero(counts)
        cats = arr.categories
        return [str(cats[i]) for i in used.tolist()], counts[used]
    codes, uniq = pd.factorize(arr)
    counts = np.bincount(codes[codes >= 0], minlength=len(uniq))
    return [str(u) for u in uniq], counts


def _matching(names: list[str], counts: np.ndarray, pat: re.Pattern[str]) -> tuple[int, str]:
    """Rows whose name matches ``pat``, and the most frequent such name (shortened)."""
    hit = [i for i, n in enumerate(names) if pat.search(n)]
    if not hit:
        return 0, ""
    best = max(hit, key=lambda i: int(counts[i]))
    return int(counts[hit].sum()), _short(names[best])


def _short(s: str, n: int = 80) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[:n - 3] + "..."


def _profiled_pids(trace: Trace) -> set[int]:
    pids: set[int] = set()
    for t in ("kernels", "cuda_api", "nvtx", "memcpy", "osrt"):
        df = getattr(trace, t, None)
        if df is not None and len(df) and "pid" in df:
            pids.update(pd.unique(df["pid"].to_numpy()).tolist())
    return {int(p) for p in pids}


def program(trace: Trace, nvtx_summary: pd.DataFrame | None = None, tensorrt: TensorRT | None = None) -> Program:
    """The ``Program`` of a trace (see the module docstring). ``nvtx_summary``: ``nvtx.range_summary``
    (one row per range name, with ``count``); ``tensorrt``: ``tensorrt.analyze_tensorrt``'s result."""
    fw: dict[str, str] = {}  # framework -> why (the first evidence found)
    ev: dict[str, str] = {}
    hits: dict[str, tuple[int, str]] = {}  # kind evidence: (count, an example)
    # kernels
    knames, kcounts = _distinct(trace.kernels["name"]) if len(trace.kernels) else ([], np.zeros(0, np.int64))
    _kernel_frameworks(knames, kcounts, fw)
    for key, pat in (("bwd", BACKWARD), ("opt", OPTIMIZER), ("inf", INFERENCE_KERNELS)):
        hits[key] = _matching(knames, kcounts, pat)
    # NVTX: range names (library ranges name their library) and domains
    py_domain = _nvtx_frameworks(trace, nvtx_summary, fw, hits)
    n_cudf, ex_cudf = _matching(knames, kcounts, CUDF_KERNELS)  # after NVTX: cudf_python's ranges say Python
    if n_cudf:
        fw.setdefault(CUDF, f"{n_cudf:,} kernels such as {ex_cudf}")
    # TensorRT engine executions
    if tensorrt is not None and getattr(tensorrt, "found", False):
        ex = getattr(tensorrt, "executions", None)
        fw.setdefault(TENSORRT, f"{len(ex) if ex is not None else 0:,} TensorRT engine executions")
    # CUDA API: OpenACC's runtime
    anames, acounts = _distinct(trace.cuda_api["name"]) if len(trace.cuda_api) else ([], np.zeros(0, np.int64))
    n_acc, ex_acc = _matching(anames, acounts, OPENACC_API)
    if n_acc:
        fw.setdefault(OPENACC, f"{n_acc:,} OpenACC runtime calls such as {ex_acc}")
    # threads and processes (the profiled ones)
    tnames, pnames = _thread_and_process_names(trace)
    autograd = sorted(n for n in tnames if AUTOGRAD_THREAD.search(n))
    if autograd:
        fw.setdefault(PYTORCH, f"PyTorch autograd thread '{autograd[0]}'")
    xla_threads = sorted(n for n in tnames if XLA_THREADS.search(n))
    if xla_threads:
        fw.setdefault(XLA, f"XLA thread '{_short(xla_threads[0], 40)}'")
    kind, ev["kind"] = _kind(hits, fw, autograd, knames, kcounts)
    python, ev["python"] = _python(pnames, tnames, py_domain, fw)
    if PYTORCH in fw:
        fw.pop("pyprof", None)
    for name, why in fw.items():
        ev[f"framework:{name}"] = why
    return Program(kind=kind, python=python, frameworks=frozenset(fw), evidence=ev)


def _kernel_frameworks(knames: list[str], kcounts: np.ndarray, fw: dict[str, str]) -> None:
    """The libraries and programming models the kernel names show, into ``fw``."""
    for lib, pat in _KERNEL_LIBS:
        n, ex = _matching(knames, kcounts, pat)
        if n:
            fw.setdefault(lib, f"{n:,} kernels such as {ex}")
    if OPENMP in fw and OPENACC in fw and not any(re.search(r"^\w+_\d+_gpu$", k) and "__pgi_uacc_" not in k
                                                  for k in knames):
        fw.pop(OPENACC)  # NVHPC's runtime fill kernels (__pgi_uacc_cuda_fill) serve OpenMP offload too


def _nvtx_frameworks(trace: Trace, nvtx_summary: pd.DataFrame | None, fw: dict[str, str],
                     hits: dict[str, tuple[int, str]]) -> str | None:
    """The libraries NVTX range names and domains show, into ``fw``; the training and inference
    ranges into ``hits``. Returns the first Python NVTX domain, or None."""
    rnames: list[str] = []
    rcounts = np.zeros(0, np.int64)
    if nvtx_summary is not None and len(nvtx_summary) and {"name", "count"} <= set(nvtx_summary.columns):
        g = nvtx_summary.groupby(nvtx_summary["name"].astype(str), sort=True)["count"].sum()
        if len(g) > MAX_RANGE_NAMES:  # 300,000 distinct texts: the most frequent tell what the program is
            g = g.sort_values(ascending=False, kind="stable").iloc[:MAX_RANGE_NAMES]
        rnames, rcounts = [str(x) for x in g.index], g.to_numpy(np.int64)
    user_idx = []
    for i, nm in enumerate(rnames):
        lib = library_of(nm)
        if lib is None:
            user_idx.append(i)
            continue
        lab = {"XLA": XLA, "pyprof": PYTORCH}.get(lib, lib)
        fw.setdefault(lab, f"NVTX ranges such as '{_short(nm)}'")
        if lib == "pyprof":
            fw.setdefault("pyprof", f"NVTX ranges such as '{_short(nm)}'")
    domains, _ = _distinct(trace.nvtx["domain"].dropna()) if len(trace.nvtx) and "domain" in trace.nvtx else ([], None)
    py_domain = next((d for d in domains if PYTHON_DOMAINS.search(d)), None)
    for d in domains:
        lib = library_of(f"{d}:", d)
        if lib:
            fw.setdefault({"XLA": XLA}.get(lib, lib), f"NVTX domain '{_short(d)}'")
    hits["trr"] = _matching(rnames, rcounts, TRAINING_RANGES)
    unames, ucounts = [rnames[i] for i in user_idx], rcounts[user_idx] if len(rcounts) else rcounts
    hits["utr"] = _matching(unames, ucounts, USER_TRAINING)
    hits["uin"] = _matching(unames, ucounts, USER_INFERENCE)
    return py_domain


def _thread_and_process_names(trace: Trace) -> tuple[set[str], list[str]]:
    """The names of the profiled processes' threads, and of those processes (sorted)."""
    pids = _profiled_pids(trace)
    tnames = set()
    th = trace.threads
    if len(th):
        sel = th.loc[th["pid"].isin(list(pids)).to_numpy()] if pids else th
        tnames = {str(n) for n in sel["name"].dropna().astype(str).unique()}
    pr = trace.processes
    pnames: list[str] = []
    if len(pr) and pids:
        pnames = sorted({str(n) for n in pr.loc[pr["pid"].isin(list(pids)).to_numpy(), "name"].dropna().astype(str)})
    return tnames, pnames


def _kind(hits: dict[str, tuple[int, str]], fw: dict[str, str], autograd: list[str], knames: list[str],
          kcounts: np.ndarray) -> tuple[str, str]:
    """Training, inference or unknown, and why."""
    (n_bwd, ex_bwd), (n_opt, ex_opt), (n_inf, ex_inf) = hits["bwd"], hits["opt"], hits["inf"]
    (n_trr, ex_trr), (n_utr, ex_utr), (n_uin, ex_uin) = hits["trr"], hits["utr"], hits["uin"]
    # training repeats: a backward pass or an optimizer step seen a few times (a test run that calls
    # backward once, NVIDIA Fuser's pytest with one nll_loss_backward kernel, is not a training loop)
    if n_bwd >= MIN_TRAINING_REPEATS or n_opt >= MIN_TRAINING_REPEATS or n_trr >= MIN_TRAINING_REPEATS \
            or n_utr >= MIN_TRAINING_REPEATS:
        why = []
        if n_bwd:
            why.append(f"{n_bwd:,} backward-pass kernels such as {ex_bwd}")
        if n_opt:
            why.append(f"{n_opt:,} optimizer kernels such as {ex_opt}")
        if n_trr:
            why.append(f"{n_trr:,} backward/optimizer NVTX ranges such as '{ex_trr}'")
        if autograd:
            why.append(f"autograd engine thread '{autograd[0]}'")
        if n_utr:
            why.append(f"{n_utr:,} NVTX ranges '{ex_utr}'")
        return TRAINING, "; ".join(why)
    if TENSORRT in fw or n_inf or n_uin:
        why = []
        if TENSORRT in fw:
            why.append(f"TensorRT (an inference runtime): {fw[TENSORRT]}")
        if n_inf:
            why.append(f"{n_inf:,} inference-mode kernels such as {ex_inf}")
        if n_uin:
            why.append(f"{n_uin:,} NVTX ranges '{ex_uin}'")
        return INFERENCE, "; ".join(why) + "; no backward-pass or optimizer kernels"
    n_torch, _ = _matching(knames, kcounts, _KERNEL_LIBS[0][1])
    if n_torch >= MIN_FORWARD_KERNELS:
        return INFERENCE, (f"{n_torch:,} PyTorch kernels and no backward-pass or optimizer kernel "
                           "among them (forward passes only)")
    return UNKNOWN, "no backward-pass, optimizer or inference evidence in the kernels and ranges"


def _python(pnames: list[str], tnames: set[str], py_domain: str | None, fw: dict[str, str]) -> tuple[bool | None, str]:
    """Whether the program is Python (None: unknown), and why."""
    py_proc = [p for p in pnames if PYTHON_PROCESS.search(p.strip())]
    py_thr = sorted(n for n in tnames if PYTHON_THREADS.search(n))
    # cuDF seen only in kernel names may be its C++ core (libcudf's cudf:: kernels): no Python evidence
    py_fw = sorted(n for n in set(fw) & PYTHON_FRAMEWORKS if n != CUDF or " kernels such as " not in fw[n])
    if py_proc:
        return True, f"profiled process '{_short(py_proc[0], 60)}'"
    if py_domain:
        return True, f"NVTX domain '{py_domain}'"
    if py_fw:
        return True, f"{py_fw[0]} (a Python library): {fw[py_fw[0]]}"
    if py_thr:
        return True, f"thread '{py_thr[0]}'"
    if pnames:
        return False, "profiled processes " + ", ".join(f"'{_short(p, 40)}'" for p in pnames[:3])
    if set(fw) & (DIRECTIVES | {JULIA}):
        lib = sorted(set(fw) & (DIRECTIVES | {JULIA}))[0]
        return False, f"{lib} program: {fw[lib]}"
    return None, "no process names or Python evidence in the trace"


def program_records(p: Program) -> Iterable[tuple[str, str]]:
    """(label, text) pairs for the report's info list."""
    yield "Program", p.summary()
    if "kind" in p.evidence:
        yield "Program kind evidence", p.evidence["kind"]
    if "python" in p.evidence:
        yield "Python evidence", p.evidence["python"]
