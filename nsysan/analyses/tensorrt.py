"""TensorRT engine executions and per-layer tables, from TensorRT's own NVTX ranges.

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

**CUDA Graphs.** An ``enqueueV3`` captured into a CUDA Graph emits its ranges once, during capture,
where no GPU work runs (``captured``); the replays (``cudaGraphLaunch``) carry no TensorRT range.
Graph launches of a process after a capture ended are counted as that engine's ``graph_replays``
(the latest capture before them in the process: an export does not say which graph holds which
engine), with their GPU time; per-layer GPU time of replays is not available.

Where each part lives: ``tensorrt_ranges`` (which NVTX ranges are executions and layers),
``tensorrt_kernels`` (precision and reformat kernels by name), ``tensorrt_layers`` (the per-layer table,
with what a layer's **precision** and **reformat** mean), ``tensorrt_engines`` (engines, truncated
executions, graph replays); this module assembles the view (``TensorRT``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from nsysan.analyses.frames import category_mask, group_rows
from nsysan.analyses.tensorrt_engines import engine_numbers, engine_table, graph_replays, merge_truncated
from nsysan.analyses.tensorrt_kernels import PRECISIONS, op_classes
from nsysan.analyses.tensorrt_layers import layer_table
from nsysan.analyses.tensorrt_ranges import SYNC_TEXT, execution_rows, layer_rows, range_texts

if TYPE_CHECKING:
    from nsysan.analyses.gpu import Window
    from nsysan.trace.model import Trace

CAPTURE_BEGIN = re.compile(r"^cu(da)?StreamBeginCapture")
CAPTURE_END = re.compile(r"^cu(da)?StreamEndCapture")
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


def _locate(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the (non-overlapping, sorted) interval holding each time ``t``, or -1."""
    i = np.searchsorted(starts, t, side="right") - 1
    ok = (i >= 0) & (t <= ends[np.maximum(i, 0)])
    return np.where(ok, i, -1)


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
    layer_pos, l_exec, l_start, l_end = layer_rows(rg, ex_mask, exec_of_row)
    n_ly = len(layer_pos)
    l_text = range_texts(rg, layer_pos)
    first_of_exec = np.searchsorted(l_exec, np.arange(n_ex), side="left")
    pos = np.arange(n_ly) - first_of_exec[l_exec] if n_ly else np.zeros(0, dtype=np.int64)
    n_layers = np.bincount(l_exec, minlength=n_ex) if n_ly else np.zeros(n_ex, dtype=np.int64)

    # engines: executions with the same ordered layer names
    engine = engine_numbers(l_exec, l_text, pos, n_layers, rg["start_ns"].to_numpy()[exec_pos])
    truncated = merge_truncated(engine, l_exec, l_text, n_layers, rg["pid"].to_numpy()[exec_pos],
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
    dur, prec, refk, heavy = op_classes(sel)
    e_gpu = _per(o_exec, n_ex, dur)
    e_ops = _per(o_exec, n_ex)
    e_dev, e_stream, e_ps, e_pe = _first_ops(sel, o_exec, n_ex, e_ops)

    blocked, captured = _host_side(trace, e_pid, e_tid, e_start, e_end)
    texts = range_texts(rg, exec_pos)
    codes, uniq = pd.factorize(pd.Series(texts, dtype=object))
    is_sync = np.array([bool(SYNC_TEXT.search(str(u))) for u in uniq], dtype=bool)[codes]
    completion = np.maximum(e_end, e_pe)
    steady = np.ones(n_ex, dtype=bool) if window is None else (
        (e_start < window.end_ns) & (completion > window.start_ns))
    executions, renum = _in_time_order(pd.DataFrame({
        "exec_id": np.arange(n_ex, dtype=np.int64), "engine": engine,
        "name": rg["name"].to_numpy()[exec_pos].astype(object),
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
    replays = graph_replays(ops, executions)
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
