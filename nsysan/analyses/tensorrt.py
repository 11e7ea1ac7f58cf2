"""TensorRT engine executions and per-layer tables, from TensorRT's own NVTX ranges.

**What TensorRT emits.** With NVTX tracing (``nsys -t nvtx``) TensorRT pushes, in its ``TensorRT``
domain, one range per engine execution, ``ExecutionContext::execute`` (the synchronous
``execute``/``executeV2``) or ``ExecutionContext::enqueue`` (``enqueueV2``/``enqueueV3`` on a
stream; bare ``enqueueV3``/``executeV2`` texts are recognised too), and inside it, unless the
engine was built with ``ProfilingVerbosity::kNONE``, one range per layer, named after the ONNX
nodes it fused (``/layer1/layer1.0/conv1/Conv + /layer1/layer1.0/relu/Relu``; pointwise fusions
``PWN(PWN(/a/Sigmoid), /a/Mul)``; parallel branches ``A || B``), the format conversions it inserted
(``Reformatting CopyNode for Input Tensor 0 to <layer>``), and Myelin regions
(``{ForeignNode[/first.../last]}``), whose internals Myelin marks in its ``myelin``/``myelin-exec``
domains (``myelinGraphExecute``...; internal, never layers).

**Executions** are the execution ranges that hold no other execution range (a user range named
``enqueueV3`` around TensorRT's own is not counted twice). **Layers** are the push/pop ranges nested
directly in an execution on its thread. **Engines** are told apart by their layer sequence: the
executions with the same ordered list of layer names run the same engine (numbered in order of first
execution; executions without layer ranges form one engine "without layer ranges"). **Contexts**
cannot be named from a trace; an engine's ``contexts`` counts the distinct (thread, stream) pairs
its executions ran on, so two contexts on one thread and one stream count as one.

**GPU time** (the existing ownership rule, ``nvtx.owned_ops``): a GPU op belongs to a layer (an
execution) when its launching API call started on the range's thread inside the range.
``gpu_ns`` is the sum of those ops' durations (time on the GPU, not a span); the execution's
``proj_*`` columns are its projection (first op start to last op end). Ops launched in an execution
but outside every layer range appear as the layer ``(outside layer ranges)``. Where the trace
recorded no GPU activity every GPU column is 0 and ``gpu_recorded`` is False: the layer table is
then the CPU side only (the time TensorRT spent in each layer's range on the host).

**Precision** of a layer, from its kernels' names (time-weighted): ``fp8``, ``int8``, ``fp16``
(FP16/BF16 kernels: ``f16``, ``h16816``, ``hmma``, ``__half``...), ``tf32``, ``fp32`` (``f32f32``,
``sgemm``...); classes with at least 10% of the layer's GPU time, the largest first (``fp16+fp32``);
empty when no kernel name says. **Reformat** layers: by name (``Reformatting CopyNode ...``), or by
kernels (every kernel of the layer is a format conversion: ``genericReformat::``, ``reformat``,
``permutationKernel``; the ``Identity`` layers TensorRT uses for casts), said in ``reformat_by``.

**CUDA Graphs.** An ``enqueueV3`` captured into a CUDA Graph emits its ranges once, during capture,
where no GPU work runs (``captured``); the replays (``cudaGraphLaunch``) carry no TensorRT range.
Graph launches of a process after a capture ended are counted as that engine's ``graph_replays``
(the latest capture before them in the process: an export does not say which graph holds which
engine), with their GPU time; per-layer GPU time of replays is not available.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from nsysan.analyses.frames import category_mask, group_rows

if TYPE_CHECKING:
    from nsysan.analyses.gpu import Window
    from nsysan.trace.model import Trace

TRT_DOMAINS = frozenset({"tensorrt"})
MYELIN_DOMAINS = frozenset({"myelin", "myelin-exec"})
# an engine execution's whole text (a final newline allowed), and the prefixes of TensorRT's other
# texts: set lookups and prefixes, not a regex call per label (``range_kinds`` decides each of 300,000
# distinct labels)
EXEC_TEXTS = frozenset(f"{p}ExecutionContext::{m}" for p in ("", "I")
                       for m in ("execute", "executeV2", "enqueue", "enqueueV2", "enqueueV3")) \
    | {"enqueueV2", "enqueueV3", "executeV2"}
TRT_PREFIXES = ("ExecutionContext::", "IExecutionContext::", "Reformatting CopyNode", "{ForeignNode[")
SYNC_TEXT = re.compile(r"execute(?:V2)?$")
REFORMAT_NAME = re.compile(r"^Reformatting CopyNode\b")
OUTSIDE = "(outside layer ranges)"

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
CAPTURE_BEGIN = re.compile(r"^cu(da)?StreamBeginCapture")
CAPTURE_END = re.compile(r"^cu(da)?StreamEndCapture")
GRAPH_LAUNCH = re.compile(r"^cu(da)?GraphLaunch")
BLOCKING_SYNC = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                 "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize")


@dataclass(frozen=True)
class TensorRT:
    """The TensorRT view of a trace (empty frames when it has no TensorRT ranges).

    * ``executions``: one row per engine execution: exec_id, engine, name (the range label),
      pid, tid, start_ns, end_ns, cpu_ns, sync (execute/executeV2 by name), blocked_ns (time in
      blocking synchronize calls inside it on its thread), layers, gpu_ops, gpu_ns, device_id,
      stream_id (of its first launched op; -1 none), proj_start_ns, proj_end_ns (-1 none),
      completion_ns (max of CPU end and GPU end), captured (inside a CUDA Graph stream capture),
      truncated (the capture ended inside it: its layers are a prefix of its engine's), steady
      (inside the analysed window).
    * ``layers``: one row per layer range instance: exec_id, engine, pos (0-based order in its
      execution), layer (text), start_ns, end_ns, cpu_ns, gpu_ops, gpu_ns, reformat_gpu_ns, and
      GPU time per precision class ``<class>_ns`` for fp8/int8/fp16/tf32/fp32, heavy_fp32_ns
      (FP32/TF32 convolution/GEMM kernels).
    * ``ops``: the GPU ops launched inside executions: exec_id, layer_row (row of ``layers``; -1
      outside every layer), pid, correlation_id, start_ns, end_ns, dur_ns, api_start_ns (its launching
      call), device_id, kernel (name), precision, reformat (a format-conversion kernel), heavy
      (convolution/GEMM).
    * ``engines``: one row per engine (see ``engine_table``); ``table``: the per-layer table of the
      steady executions (all executions when none is steady; see ``layer_table``).
    """

    executions: pd.DataFrame
    layers: pd.DataFrame
    ops: pd.DataFrame
    engines: pd.DataFrame
    table: pd.DataFrame
    gpu_recorded: bool
    table_window: str = "none"
    notes: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return len(self.executions) > 0


def _text(name: str, domain: str | None) -> str:
    return name[len(domain) + 1:] if domain and name.startswith(domain + ":") else name


def _texts(rg: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The range text (label without its ``domain:`` prefix) of the given rows, computed once per
    distinct (label, domain)."""
    if len(rows) == 0:
        return np.zeros(0, dtype=object)
    names = pd.Series(rg["name"].to_numpy()[rows], dtype=object).astype(str)
    doms = (pd.Series(rg["domain"].to_numpy()[rows], dtype=object) if "domain" in rg
            else pd.Series([None] * len(rows), dtype=object))
    doms = doms.where(doms.notna(), "")
    codes, uniq = pd.factorize(pd.MultiIndex.from_arrays([names.to_numpy(), doms.astype(str).to_numpy()]))
    lut = np.array([_text(str(n), str(d) or None) for n, d in uniq], dtype=object)
    return lut[codes]


def range_kinds(rg: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per NVTX range (``nvtx.ranges`` rows): is it TensorRT's (domain or text), an execution
    range, a Myelin-internal range. Decided once per distinct label."""
    n = len(rg)
    if n == 0:
        z = np.zeros(0, dtype=bool)
        return z, z, z
    # one label = one (domain, text): nsys labels a range in a domain "domain:text"
    codes, uniq = pd.factorize(rg["name"])
    first = np.full(len(uniq), -1, dtype=np.int64)
    first[codes[::-1]] = np.arange(n - 1, -1, -1)
    doms = rg["domain"].to_numpy()[first] if "domain" in rg else np.full(len(uniq), None)
    trt, ex, my = (np.zeros(len(uniq), dtype=bool) for _ in range(3))
    for i, (name, d) in enumerate(zip(uniq.tolist(), doms.tolist())):
        if d is None or d is pd.NA or (isinstance(d, float) and np.isnan(d)):
            text, dl = str(name), ""
        else:
            d = str(d).strip()
            text, dl = _text(str(name), d or None), d.lower()
        m = dl in MYELIN_DOMAINS
        e = text in EXEC_TEXTS or (text[-1:] == "\n" and text[:-1] in EXEC_TEXTS)
        my[i] = m
        trt[i] = dl in TRT_DOMAINS or m or text.startswith(TRT_PREFIXES) or e
        ex[i] = e and not m
    return trt[codes], ex[codes], my[codes]


def execution_rows(rg: pd.DataFrame) -> np.ndarray:
    """Mask of the engine executions among ``nvtx.ranges`` rows: execution ranges that hold no
    other execution range (push/pop nesting, ``parent``)."""
    _, ex, _ = range_kinds(rg)
    if not ex.any():
        return ex
    parent = rg["parent"].to_numpy()
    inner_of = parent[ex & (parent >= 0)]
    outer = np.zeros(len(rg), dtype=bool)
    outer[inner_of[ex[inner_of]]] = True
    return ex & ~outer


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


def _locate(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the (non-overlapping, sorted) interval holding each time ``t``, or -1."""
    i = np.searchsorted(starts, t, side="right") - 1
    ok = (i >= 0) & (t <= ends[np.maximum(i, 0)])
    return np.where(ok, i, -1)


def _nodes(text: str) -> list[str]:
    """The ONNX nodes a layer name says it fused (empty for reformats and copies)."""
    if REFORMAT_NAME.match(text) or text == OUTSIDE:
        return []
    m = re.match(r"^\{ForeignNode\[(.*)\]\}$", text)
    if m:
        return [p for p in m.group(1).split("...") if p]
    parts = re.split(r"\s+\+\s+|\s+\|\|\s+|,\s+", text.replace("PWN(", ""))
    return [p.strip().rstrip(")").strip() for p in parts if p.strip().rstrip(")").strip()]


def _empty_frames() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    def frame(ints: tuple[str, ...], **others: str) -> pd.DataFrame:  # numpy arrays: no Series per column
        return pd.DataFrame({**{c: np.empty(0, dtype=np.int64) for c in ints},
                             **{c: np.empty(0, dtype=t) for c, t in others.items()}}, copy=False)

    ex = frame(("exec_id", "engine", "pid", "tid", "start_ns", "end_ns", "cpu_ns", "blocked_ns", "layers", "gpu_ops",
                "gpu_ns", "device_id", "stream_id", "proj_start_ns", "proj_end_ns", "completion_ns"),
               name="object", sync="bool", captured="bool", truncated="bool", steady="bool")
    ly = frame(("exec_id", "engine", "pos", "start_ns", "end_ns", "cpu_ns", "gpu_ops", "gpu_ns", "reformat_gpu_ns",
                *(f"{p}_ns" for p in PRECISIONS[1:]), "heavy_fp32_ns", "reformat_kernel_ops"), layer="object")
    ops = frame(("exec_id", "layer_row", "pid", "correlation_id", "start_ns", "end_ns", "dur_ns", "api_start_ns",
                 "device_id"), kernel="object", precision="object", reformat="bool", heavy="bool")
    return ex, ly, ops


def _in_time_order(executions: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The executions renumbered by start (exec ids in time order for the reader), and each old id's
    new one."""
    n_ex = len(executions)
    t_order = np.lexsort((executions["pid"].to_numpy(), executions["start_ns"].to_numpy()))
    renum = np.empty(n_ex, dtype=np.int64)
    renum[t_order] = np.arange(n_ex)
    return executions.iloc[t_order].assign(exec_id=np.arange(n_ex)).reset_index(drop=True), renum


def analyze_tensorrt(trace: Trace, ops: pd.DataFrame, rg: pd.DataFrame, window: Window | None = None) -> TensorRT:
    """The TensorRT view (see the module docstring). ``ops`` is ``summaries.gpu_ops(trace)`` (with
    the launching call), ``rg`` is ``nvtx.ranges(...)``, ``window`` the analysed (steady) window."""
    gpu_recorded = len(ops) > 0
    ex_empty, ly_empty, op_empty = _empty_frames()
    if len(rg) == 0:
        return TensorRT(ex_empty, ly_empty, op_empty, engine_table(ex_empty, ly_empty), pd.DataFrame(), gpu_recorded)
    ex_mask = execution_rows(rg)
    if not ex_mask.any():
        return TensorRT(ex_empty, ly_empty, op_empty, engine_table(ex_empty, ly_empty), pd.DataFrame(), gpu_recorded)
    exec_pos = np.flatnonzero(ex_mask)
    ex_start = rg["start_ns"].to_numpy()[exec_pos]
    ex_pid = rg["pid"].to_numpy()[exec_pos]
    ex_tid = rg["tid"].to_numpy()[exec_pos]
    order = np.lexsort((ex_start, ex_tid, ex_pid))
    exec_pos = exec_pos[order]  # executions sorted by (pid, tid, start): per-thread slices are sorted
    n_ex = len(exec_pos)
    exec_of_row = np.full(len(rg), -1, dtype=np.int64)
    exec_of_row[exec_pos] = np.arange(n_ex)
    layer_pos, l_exec, l_start, l_end = _layer_rows(rg, ex_mask, exec_of_row)
    n_ly = len(layer_pos)
    l_text = _texts(rg, layer_pos)
    first_of_exec = np.searchsorted(l_exec, np.arange(n_ex), side="left")
    pos = np.arange(n_ly) - first_of_exec[l_exec] if n_ly else np.zeros(0, dtype=np.int64)
    n_layers = np.bincount(l_exec, minlength=n_ex) if n_ly else np.zeros(n_ex, dtype=np.int64)

    # engines: executions with the same ordered layer names
    engine = _engines(l_exec, l_text, pos, n_layers, rg["start_ns"].to_numpy()[exec_pos])
    truncated = _merge_truncated(engine, l_exec, l_text, n_layers, rg["pid"].to_numpy()[exec_pos],
                                 rg["tid"].to_numpy()[exec_pos])

    # GPU ops launched inside executions (and layers), per thread
    e_start = rg["start_ns"].to_numpy()[exec_pos]
    e_end = rg["end_ns"].to_numpy()[exec_pos]
    e_pid, e_tid = rg["pid"].to_numpy()[exec_pos], rg["tid"].to_numpy()[exec_pos]
    if gpu_recorded:
        orows, o_exec, o_layer = _ops_in_executions(ops, e_pid, e_tid, e_start, e_end, l_exec, l_start, l_end)
    else:
        orows = o_exec = o_layer = np.zeros(0, dtype=np.int64)
    sel = ops.iloc[orows] if len(orows) else ops.iloc[0:0]
    dur, prec, refk, heavy = _op_classes(sel)
    e_gpu = _per(o_exec, n_ex, dur)
    e_ops = _per(o_exec, n_ex)
    e_dev, e_stream, e_ps, e_pe = _first_ops(sel, o_exec, n_ex, e_ops)

    blocked, captured = _host_side(trace, e_pid, e_tid, e_start, e_end)
    texts = _texts(rg, exec_pos)
    codes, uniq = pd.factorize(pd.Series(texts, dtype=object))
    is_sync = np.array([bool(SYNC_TEXT.search(str(u))) for u in uniq], dtype=bool)[codes]
    completion = np.maximum(e_end, e_pe)
    steady = np.ones(n_ex, dtype=bool) if window is None else (
        (e_start < window.end_ns) & (completion > window.start_ns))
    executions, renum = _in_time_order(pd.DataFrame({
        "exec_id": np.arange(n_ex, dtype=np.int64), "engine": engine, "name": rg["name"].to_numpy()[exec_pos].astype(object),
        "pid": e_pid, "tid": e_tid, "start_ns": e_start, "end_ns": e_end, "cpu_ns": e_end - e_start,
        "sync": is_sync, "blocked_ns": blocked,
        "layers": n_layers.astype(np.int64), "gpu_ops": e_ops, "gpu_ns": e_gpu, "device_id": e_dev,
        "stream_id": e_stream, "proj_start_ns": e_ps, "proj_end_ns": e_pe, "completion_ns": completion,
        "captured": captured, "truncated": truncated, "steady": steady}))
    l_exec_t = renum[l_exec] if n_ly else l_exec
    o_exec_t = renum[o_exec] if len(o_exec) else o_exec

    cols: dict[str, Any] = {
        "exec_id": l_exec_t, "engine": engine[l_exec] if n_ly else np.zeros(0, np.int64), "pos": pos.astype(np.int64),
        "layer": l_text, "start_ns": l_start, "end_ns": l_end, "cpu_ns": l_end - l_start,
        **_layer_gpu_columns(o_layer, n_ly, dur, prec, refk, heavy)}
    layers = pd.DataFrame(cols)
    op_frame = _op_frame(sel, o_exec_t, o_layer, dur, prec, refk, heavy)
    replays = _graph_replays(ops, executions)
    notes = _notes(gpu_recorded, n_layers, executions)
    use = executions["steady"].to_numpy()
    window_label = getattr(window, "label", "capture") if window is not None else "capture"
    if not use.any():
        use = np.ones(n_ex, dtype=bool)
        window_label = "all executions"
    table = layer_table(executions.loc[use], layers.loc[np.isin(l_exec_t, np.flatnonzero(use))] if n_ly else layers,
                        op_frame, gpu_recorded=gpu_recorded)
    return TensorRT(executions, layers, op_frame, engine_table(executions, layers, replays), table, gpu_recorded,
                    window_label, notes)


def _layer_rows(rg: pd.DataFrame, ex_mask: np.ndarray,
                exec_of_row: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The layer ranges (push/pop ranges whose parent is an execution): their rows in ``rg``,
    execution, start and end, ordered by (execution, start)."""
    parent = rg["parent"].to_numpy()
    style_pp = (rg["style"] == "PushPop").to_numpy()
    is_layer = (parent >= 0) & style_pp & ~ex_mask
    is_layer &= exec_of_row[np.maximum(parent, 0)] >= 0
    layer_pos = np.flatnonzero(is_layer)
    l_exec = exec_of_row[parent[layer_pos]]
    l_start = rg["start_ns"].to_numpy()[layer_pos]
    lorder = np.lexsort((l_start, l_exec))
    layer_pos, l_exec, l_start = layer_pos[lorder], l_exec[lorder], l_start[lorder]
    return layer_pos, l_exec, l_start, rg["end_ns"].to_numpy()[layer_pos]


def _ops_in_executions(ops: pd.DataFrame, e_pid: np.ndarray, e_tid: np.ndarray, e_start: np.ndarray,
                       e_end: np.ndarray, l_exec: np.ndarray, l_start: np.ndarray,
                       l_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPU ops launched inside executions (and layers), per thread: (op rows, execution, layer or -1)."""
    op_exec_parts, op_layer_parts, op_rows_parts = [], [], []
    found = ops["api_start_ns"].to_numpy() >= 0
    o_pid, o_tid = ops["pid"].to_numpy(), ops["tid"].to_numpy()
    o_api = ops["api_start_ns"].to_numpy()
    threads = {k: rows for k, rows in group_rows(e_pid, e_tid)}
    l_pid, l_tid = e_pid[l_exec], e_tid[l_exec]
    lthreads = {k: rows for k, rows in group_rows(l_pid, l_tid)} if len(l_exec) else {}
    for key, orows in group_rows(o_pid, o_tid):
        erows = threads.get(key)
        if erows is None:
            continue
        orows = orows[found[orows]]
        api = o_api[orows]
        ei = _locate(e_start[erows], e_end[erows], api)
        keep = ei >= 0
        if not keep.any():
            continue
        orows, api, ei = orows[keep], api[keep], erows[ei[keep]]
        li = np.full(len(orows), -1, dtype=np.int64)
        lrows = lthreads.get(key)
        if lrows is not None:
            # layers of one thread: sorted by (exec, start), which is start order on a thread
            s_order = np.argsort(l_start[lrows], kind="stable")
            lrows = lrows[s_order]
            j = _locate(l_start[lrows], l_end[lrows], api)
            li = np.where(j >= 0, lrows[np.maximum(j, 0)], -1)
            li = np.where((li >= 0) & (l_exec[np.maximum(li, 0)] == ei), li, -1)
        op_exec_parts.append(ei)
        op_layer_parts.append(li)
        op_rows_parts.append(orows)
    if not op_rows_parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    return np.concatenate(op_rows_parts), np.concatenate(op_exec_parts), np.concatenate(op_layer_parts)


def _op_classes(sel: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per op of ``sel``: duration, precision class, whether a reformat kernel, whether a heavy kernel."""
    dur = sel["dur_ns"].to_numpy().astype(np.int64) if len(sel) else np.zeros(0, dtype=np.int64)
    prec, refk, heavy = _classes(sel["name"]) if len(sel) else (np.zeros(0, np.int8), np.zeros(0, bool),
                                                                  np.zeros(0, bool))
    is_kernel = (sel["op"].astype(str).to_numpy() == "kernel") if len(sel) else np.zeros(0, bool)
    return dur, prec, refk & is_kernel, heavy & is_kernel


def _per(idx: np.ndarray, n: int, w: np.ndarray | None = None) -> np.ndarray:
    """Per slot 0..n-1: the count (or the sum of ``w``) of the entries ``idx`` (-1: none) naming it."""
    m = idx >= 0
    if not m.any():
        return np.zeros(n, dtype=np.int64)
    return np.bincount(idx[m], weights=None if w is None else w[m].astype(np.float64),
                       minlength=n).round().astype(np.int64)


def _first_ops(sel: pd.DataFrame, o_exec: np.ndarray, n_ex: int,
               e_ops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per execution: the device and stream of its first launched op, and its ops' extent on the GPU
    (start, end; -1 without ops)."""
    e_dev = np.full(n_ex, -1, dtype=np.int64)
    e_stream = np.full(n_ex, -1, dtype=np.int64)
    e_ps = np.full(n_ex, -1, dtype=np.int64)
    e_pe = np.full(n_ex, -1, dtype=np.int64)
    if len(sel):
        api = sel["api_start_ns"].to_numpy()
        o = np.lexsort((api, o_exec))
        first = o[np.r_[True, o_exec[o][1:] != o_exec[o][:-1]]]
        e_dev[o_exec[first]] = sel["device_id"].to_numpy()[first]
        e_stream[o_exec[first]] = sel["stream_id"].to_numpy()[first]
        mn = np.full(n_ex, np.iinfo(np.int64).max, dtype=np.int64)
        mx = np.full(n_ex, -1, dtype=np.int64)
        np.minimum.at(mn, o_exec, sel["start_ns"].to_numpy())
        np.maximum.at(mx, o_exec, sel["end_ns"].to_numpy())
        has = e_ops > 0
        e_ps[has], e_pe[has] = mn[has], mx[has]
    return e_dev, e_stream, e_ps, e_pe


def _layer_gpu_columns(o_layer: np.ndarray, n_ly: int, dur: np.ndarray, prec: np.ndarray, refk: np.ndarray,
                       heavy: np.ndarray) -> dict[str, np.ndarray]:
    """The layer table's GPU columns: ops, time, reformat time, time per precision, heavy FP32 time."""
    cols = {"gpu_ops": _per(o_layer, n_ly), "gpu_ns": _per(o_layer, n_ly, dur),
            "reformat_gpu_ns": _per(o_layer, n_ly, dur * refk)}
    for c, p in enumerate(PRECISIONS[1:], start=1):
        cols[f"{p}_ns"] = _per(o_layer, n_ly, dur * (prec == c))
    cols["heavy_fp32_ns"] = _per(o_layer, n_ly, dur * (heavy & ((prec == 4) | (prec == 5))))
    cols["reformat_kernel_ops"] = _per(o_layer, n_ly, refk.astype(np.int64))
    return cols


def _op_frame(sel: pd.DataFrame, o_exec_t: np.ndarray, o_layer: np.ndarray, dur: np.ndarray, prec: np.ndarray,
              refk: np.ndarray, heavy: np.ndarray) -> pd.DataFrame:
    """The ops launched inside executions, one row each."""
    return pd.DataFrame({
        "exec_id": o_exec_t, "layer_row": o_layer, "pid": sel["pid"].to_numpy() if len(sel) else o_exec_t,
        "correlation_id": sel["correlation_id"].to_numpy() if len(sel) else o_exec_t,
        "start_ns": sel["start_ns"].to_numpy() if len(sel) else o_exec_t,
        "end_ns": sel["end_ns"].to_numpy() if len(sel) else o_exec_t, "dur_ns": dur,
        "api_start_ns": sel["api_start_ns"].to_numpy() if len(sel) else o_exec_t,
        "device_id": sel["device_id"].to_numpy() if len(sel) else o_exec_t,
        "kernel": sel["name"].astype(str).to_numpy() if len(sel) else np.zeros(0, dtype=object),
        "precision": np.asarray(PRECISIONS, dtype=object)[prec] if len(sel) else np.zeros(0, dtype=object),
        "reformat": refk, "heavy": heavy})


def _notes(gpu_recorded: bool, n_layers: np.ndarray, executions: pd.DataFrame) -> list[str]:
    """What the TensorRT view cannot show in this trace, and why."""
    notes = []
    if not gpu_recorded:
        notes.append("GPU activity was not recorded in this trace (no kernel, memcpy or memset tables): the "
                     "layer table shows TensorRT's CPU-side time per layer only; record with nsys -t cuda,nvtx")
    if (n_layers == 0).all():
        notes.append("the executions hold no layer ranges: build the engine with profiling verbosity "
                     "kLAYER_NAMES_ONLY or kDETAILED (trtexec --profilingVerbosity=detailed) to get them")
    if executions["captured"].any():
        notes.append("executions captured into a CUDA Graph run no GPU work when traced; their replays "
                     "(cudaGraphLaunch) carry no TensorRT ranges: per-layer GPU time is not available for them")
    return notes


def _engines(l_exec: np.ndarray, l_text: np.ndarray, pos: np.ndarray, n_layers: np.ndarray,
             e_start: np.ndarray) -> np.ndarray:
    """Engine number per execution (1-based, in order of first execution): a hash of the ordered
    layer names (position-weighted sum of name codes, uint64 arithmetic) plus the layer count."""
    n_ex = len(n_layers)
    h = np.zeros(n_ex, dtype=np.uint64)
    if len(l_exec):
        codes, _ = pd.factorize(pd.Series(l_text, dtype=object))
        w = np.random.default_rng(12345).integers(1, 2**63 - 1, size=int(pos.max()) + 1, dtype=np.int64).astype(np.uint64)
        with np.errstate(over="ignore"):
            contrib = (codes.astype(np.uint64) + np.uint64(1)) * w[pos]
        starts = np.flatnonzero(np.r_[True, l_exec[1:] != l_exec[:-1]])
        sums = np.add.reduceat(contrib, starts)
        h[l_exec[starts]] = sums
    key = pd.MultiIndex.from_arrays([h.astype(np.uint64), n_layers.astype(np.int64)])
    first_order = np.argsort(e_start, kind="stable")
    codes, _ = pd.factorize(key[first_order])
    out = np.empty(n_ex, dtype=np.int64)
    out[first_order] = codes + 1
    return out


def _merge_truncated(engine: np.ndarray, l_exec: np.ndarray, l_text: np.ndarray, n_layers: np.ndarray,
                     pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """The last execution of a thread whose layers are a strict prefix of another engine's was cut
    by the end of the capture (nsys closes open ranges there): it joins that engine (``engine`` is
    changed in place) and is flagged truncated. Executions are sorted by (pid, tid, start)."""
    n = len(engine)
    truncated = np.zeros(n, dtype=bool)
    if n < 2 or len(l_exec) == 0:
        return truncated
    last = np.r_[(pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1]), True]
    first_ex = {}
    for e in np.unique(engine).tolist():
        first_ex[e] = int(np.flatnonzero(engine == e)[0])
    lo = np.searchsorted(l_exec, np.arange(n), side="left")
    hi = np.searchsorted(l_exec, np.arange(n), side="right")
    seq = {e: list(l_text[lo[i]:hi[i]]) for e, i in first_ex.items()}
    for i in np.flatnonzero(last).tolist():
        mine = list(l_text[lo[i]:hi[i]])
        if (engine == engine[i]).sum() != 1 or not mine:
            continue
        for e, sq in seq.items():
            if e != engine[i] and len(sq) > len(mine) and sq[:len(mine)] == mine:
                engine[i] = e
                truncated[i] = True
                break
    if truncated.any():  # renumber engines 1..k in order of first appearance
        _, codes = np.unique(engine, return_inverse=True)
        order: dict[int, int] = {}
        for c in codes[np.argsort([first_ex.get(int(engine[j]), j) for j in range(n)], kind="stable")].tolist():
            order.setdefault(c, len(order) + 1)
        engine[:] = np.array([order[c] for c in codes.tolist()], dtype=np.int64)
    return truncated


def layer_is_reformat(layers: pd.DataFrame) -> np.ndarray:
    """Per layer instance (``TensorRT.layers`` rows): a reformat by name, or every op it launched a
    format-conversion kernel (see the module docstring)."""
    if len(layers) == 0:
        return np.zeros(0, dtype=bool)
    by_name = category_mask(layers["layer"].astype("category"), lambda x: bool(REFORMAT_NAME.match(x)))
    ops = layers["gpu_ops"].to_numpy()
    return by_name | ((ops > 0) & (layers["reformat_kernel_ops"].to_numpy() == ops))


def _host_side(trace: Trace, pid: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Per execution: ns in blocking synchronize calls inside it (same thread), and whether it ran
    inside a stream capture (cudaStreamBeginCapture ... cudaStreamEndCapture on its thread)."""
    n = len(start)
    blocked = np.zeros(n, dtype=np.int64)
    captured = np.zeros(n, dtype=bool)
    api = trace.cuda_api
    if len(api) == 0 or n == 0:
        return blocked, captured
    nm = api["name"]
    sync = category_mask(nm, lambda s: s in BLOCKING_SYNC)
    beg = category_mask(nm, lambda s: bool(CAPTURE_BEGIN.match(s)))
    fin = category_mask(nm, lambda s: bool(CAPTURE_END.match(s)))
    want = sync | beg | fin
    if not want.any():
        return blocked, captured
    rows = np.flatnonzero(want)
    a_pid, a_tid = api["pid"].to_numpy()[rows], api["tid"].to_numpy()[rows]
    a_s, a_e = api["start_ns"].to_numpy()[rows], api["end_ns"].to_numpy()[rows]
    kind = np.where(sync[rows], 0, np.where(beg[rows], 1, 2))
    ex_threads = dict(group_rows(pid, tid))
    for key, r in group_rows(a_pid, a_tid):
        erows = ex_threads.get(key)
        if erows is None:
            continue
        es, ee = start[erows], end[erows]  # sorted per thread by the caller
        s_rows = r[kind[r] == 0]
        if len(s_rows):
            i = _locate(es, ee, a_s[s_rows])
            ok = i >= 0
            clipped = np.minimum(a_e[s_rows][ok], ee[i[ok]]) - a_s[s_rows][ok]
            np.add.at(blocked, erows[i[ok]], clipped)
        b_rows, f_rows = r[kind[r] == 1], r[kind[r] == 2]
        if len(b_rows):
            bs = np.sort(a_s[b_rows])
            fe = np.sort(a_e[f_rows]) if len(f_rows) else np.zeros(0, dtype=np.int64)
            # each begin pairs with the first end after it (no end: capture runs to the end of the trace)
            j = np.searchsorted(fe, bs, side="right")
            be = np.where(j < len(fe), fe[np.minimum(j, max(len(fe) - 1, 0))] if len(fe) else 0, np.iinfo(np.int64).max)
            k = np.searchsorted(bs, es, side="right") - 1
            captured[erows] = (k >= 0) & (es <= be[np.maximum(k, 0)])
    return blocked, captured


def _graph_replays(ops: pd.DataFrame, executions: pd.DataFrame) -> pd.DataFrame:
    """Per engine: graph launches (count, GPU ns) of a process after one of its captured executions
    (assigned to the latest capture before them in the process)."""
    out = pd.DataFrame({"engine": pd.Series(dtype="int64"), "graph_replays": pd.Series(dtype="int64"),
                        "graph_replay_gpu_ns": pd.Series(dtype="int64")})
    cap = executions.loc[executions["captured"]]
    if len(cap) == 0 or len(ops) == 0 or "api_name" not in ops:
        return out
    gl = category_mask(ops["api_name"], lambda s: bool(GRAPH_LAUNCH.match(s)))
    if not gl.any():
        return out
    g = ops.loc[gl, ["pid", "api_start_ns", "correlation_id", "dur_ns"]]
    parts = []
    for pid, c in cap.groupby("pid", sort=True):
        c = c.sort_values("end_ns", kind="stable")
        gg = g.loc[g["pid"] == pid]
        i = np.searchsorted(c["end_ns"].to_numpy(), gg["api_start_ns"].to_numpy(), side="right") - 1
        ok = i >= 0
        parts.append(pd.DataFrame({"engine": c["engine"].to_numpy()[i[ok]],
                                   "correlation_id": gg["correlation_id"].to_numpy()[ok],
                                   "dur_ns": gg["dur_ns"].to_numpy()[ok]}))
    if not parts:
        return out
    p = pd.concat(parts, ignore_index=True)
    return p.groupby("engine", sort=True).agg(graph_replays=("correlation_id", "nunique"),
                                             graph_replay_gpu_ns=("dur_ns", "sum")).reset_index()


def layer_table(executions: pd.DataFrame, layers: pd.DataFrame, ops: pd.DataFrame, *,
                gpu_recorded: bool) -> pd.DataFrame:
    """Per engine and layer (name), over the given executions, in execution order (``order``: the
    layer's position in its first execution). Columns: engine, order, layer, count (instances),
    executions, cpu_total_ns, cpu_avg_ns, gpu_total_ns, gpu_avg_ns (per instance), gpu_ops,
    gpu_share (of the engine's execution GPU time; None without GPU activity), cpu_share (of the
    engine's execution CPU time), reformat, reformat_by ("name", "kernels" or ""), precision,
    fused (number of ONNX nodes), nodes ("; "-joined), kind ("reformat", "myelin", "layer",
    "outside"). A row ``(outside layer ranges)`` holds GPU work launched in an execution outside
    every layer range."""
    if len(executions) == 0:
        return pd.DataFrame()
    ly = layers
    ex_ids = executions["exec_id"].to_numpy()
    if len(ops):
        o = ops.loc[np.isin(ops["exec_id"].to_numpy(), ex_ids) & (ops["layer_row"].to_numpy() < 0)]
        if len(o):
            ex_of = executions.set_index("exec_id")["engine"]
            out_rows = o.groupby("exec_id", sort=True).agg(gpu_ns=("dur_ns", "sum"), gpu_ops=("dur_ns", "size"))
            out_rows = out_rows.reset_index().assign(engine=lambda d: ex_of.loc[d["exec_id"]].to_numpy(),
                                                     layer=OUTSIDE, pos=10**9, start_ns=0, end_ns=0, cpu_ns=0,
                                                     reformat_gpu_ns=0, reformat_kernel_ops=0,
                                                     heavy_fp32_ns=0)
            ly = pd.concat([ly, out_rows], ignore_index=True).fillna(0)
    if len(ly) == 0:
        return pd.DataFrame()
    prec_cols = [f"{p}_ns" for p in PRECISIONS[1:]]
    g = ly.groupby(["engine", "layer"], sort=False, observed=True)
    t = g.agg(order=("pos", "min"), count=("cpu_ns", "size"), executions=("exec_id", "nunique"),
              cpu_total_ns=("cpu_ns", "sum"), gpu_total_ns=("gpu_ns", "sum"), gpu_ops=("gpu_ops", "sum"),
              reformat_gpu_ns=("reformat_gpu_ns", "sum"), reformat_kernel_ops=("reformat_kernel_ops", "sum"),
              heavy_fp32_ns=("heavy_fp32_ns", "sum"), **{c: (c, "sum") for c in prec_cols}).reset_index()
    eng = executions.groupby("engine", sort=True).agg(e_gpu=("gpu_ns", "sum"), e_cpu=("cpu_ns", "sum"))
    e_gpu = eng["e_gpu"].reindex(t["engine"]).to_numpy().astype(float)
    e_cpu = eng["e_cpu"].reindex(t["engine"]).to_numpy().astype(float)
    layer = t["layer"].astype(str).to_numpy()
    by_name = np.array([bool(REFORMAT_NAME.match(s)) for s in layer], dtype=bool)
    by_kernels = (~by_name & (t["gpu_ops"].to_numpy() > 0) & (t["reformat_kernel_ops"].to_numpy() == t["gpu_ops"].to_numpy())
                  & np.array([s != OUTSIDE for s in layer], dtype=bool))
    prec_ns = t[prec_cols].to_numpy().astype(float)
    tot = prec_ns.sum(axis=1)
    precision = []
    for row, s in zip(prec_ns, tot):
        if s <= 0:
            precision.append("")
            continue
        o = np.argsort(-row, kind="stable")
        precision.append("+".join(PRECISIONS[1 + i] for i in o if row[i] >= 0.1 * s))
    nodes = [_nodes(s) for s in layer]
    kind = np.where(by_name | by_kernels, "reformat",
                    np.where([s.startswith("{ForeignNode[") for s in layer], "myelin",
                             np.where(layer == OUTSIDE, "outside", "layer")))
    out = pd.DataFrame({
        "engine": t["engine"].astype(np.int64), "order": t["order"].astype(np.int64), "layer": layer.astype(object),
        "count": t["count"].astype(np.int64), "executions": t["executions"].astype(np.int64),
        "cpu_total_ns": t["cpu_total_ns"].astype(np.int64),
        "cpu_avg_ns": (t["cpu_total_ns"] / t["count"]).round().astype(np.int64),
        "gpu_total_ns": t["gpu_total_ns"].astype(np.int64),
        "gpu_avg_ns": (t["gpu_total_ns"] / t["count"]).round().astype(np.int64),
        "gpu_ops": t["gpu_ops"].astype(np.int64),
        "gpu_share": np.where(e_gpu > 0, t["gpu_total_ns"].to_numpy() / np.where(e_gpu > 0, e_gpu, 1), np.nan)
        if gpu_recorded else np.full(len(t), np.nan),
        "cpu_share": np.where(e_cpu > 0, t["cpu_total_ns"].to_numpy() / np.where(e_cpu > 0, e_cpu, 1), 0.0),
        "reformat": by_name | by_kernels,
        "reformat_by": np.where(by_name, "name", np.where(by_kernels, "kernels", "")).astype(object),
        "precision": np.array(precision, dtype=object),
        "heavy_fp32_ns": t["heavy_fp32_ns"].astype(np.int64),
        "fused": np.array([len(n) for n in nodes], dtype=np.int64),
        "nodes": np.array(["; ".join(n) for n in nodes], dtype=object), "kind": kind.astype(object)})
    if not gpu_recorded:
        out = out.assign(gpu_share=None)
    return out.sort_values(["engine", "order", "layer"], kind="stable").reset_index(drop=True)


def engine_table(executions: pd.DataFrame, layers: pd.DataFrame,
                 replays: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per engine: engine, label, layers (per execution, median), executions, steady_executions,
    contexts (distinct thread-and-stream pairs), threads, streams, sync_executions,
    captured_executions, cpu_total_ns, cpu_p50_ns, gpu_total_ns, gpu_p50_ns (per execution),
    blocked_ns, first_layer, last_layer, graph_replays, graph_replay_gpu_ns."""
    cols = ["engine", "label", "layers", "executions", "steady_executions", "contexts", "threads", "streams",
            "sync_executions", "captured_executions", "cpu_total_ns", "cpu_p50_ns", "gpu_total_ns", "gpu_p50_ns",
            "blocked_ns", "first_layer", "last_layer", "graph_replays", "graph_replay_gpu_ns"]
    if len(executions) == 0:
        return pd.DataFrame({c: [] for c in cols})
    rows = []
    first = layers.loc[layers["pos"] == 0].drop_duplicates("engine").set_index("engine")["layer"] if len(layers) else {}
    last_idx = layers.groupby("exec_id", sort=False)["pos"].idxmax() if len(layers) else pd.Series(dtype="int64")
    last = (layers.loc[last_idx.to_numpy()].drop_duplicates("engine").set_index("engine")["layer"]
            if len(layers) else {})
    rep = replays.set_index("engine") if replays is not None and len(replays) else None
    for e, g in executions.groupby("engine", sort=True):
        e = int(e)
        n_l = int(np.median(g["layers"].to_numpy()))
        fl = str(first.get(e, "")) if len(layers) else ""
        ll = str(last.get(e, "")) if len(layers) else ""
        label = (f"engine {e} ({n_l} layers: {fl[:60]} ... {ll[:60]})" if n_l > 1 else
                 f"engine {e} ({n_l} layer: {fl[:60]})" if n_l == 1 else f"engine {e} (no layer ranges)")
        rows.append({
            "engine": e, "label": label, "layers": n_l, "executions": len(g),
            "steady_executions": int(g["steady"].sum()),
            "contexts": int(g[["pid", "tid", "stream_id"]].drop_duplicates().shape[0]),
            "threads": int(g[["pid", "tid"]].drop_duplicates().shape[0]),
            "streams": int(g.loc[g["stream_id"] >= 0, "stream_id"].nunique()),
            "sync_executions": int(g["sync"].sum()), "captured_executions": int(g["captured"].sum()),
            "cpu_total_ns": int(g["cpu_ns"].sum()), "cpu_p50_ns": int(np.median(g["cpu_ns"].to_numpy())),
            "gpu_total_ns": int(g["gpu_ns"].sum()), "gpu_p50_ns": int(np.median(g["gpu_ns"].to_numpy())),
            "blocked_ns": int(g["blocked_ns"].sum()), "first_layer": fl, "last_layer": ll,
            "graph_replays": int(rep.loc[e, "graph_replays"]) if rep is not None and e in rep.index else 0,
            "graph_replay_gpu_ns": int(rep.loc[e, "graph_replay_gpu_ns"]) if rep is not None and e in rep.index else 0,
        })
    return pd.DataFrame(rows, columns=cols)
