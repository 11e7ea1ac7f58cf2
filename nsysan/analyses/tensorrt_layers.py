"""The TensorRT per-layer table: per engine and layer name, its CPU and GPU time, precision, reformat
and fused ONNX nodes.

**Precision** of a layer, from its kernels' names (time-weighted): ``fp8``, ``int8``, ``fp16``
(FP16/BF16 kernels: ``f16``, ``h16816``, ``hmma``, ``__half``...), ``tf32``, ``fp32`` (``f32f32``,
``sgemm``...); classes with at least 10% of the layer's GPU time, the largest first (``fp16+fp32``);
empty when no kernel name says. **Reformat** layers: by name (``Reformatting CopyNode ...``), or by
kernels (every kernel of the layer is a format conversion: ``genericReformat::``, ``reformat``,
``permutationKernel``; the ``Identity`` layers TensorRT uses for casts), said in ``reformat_by``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsysan.analyses.frames import category_mask
from nsysan.analyses.tensorrt_kernels import PRECISIONS
from nsysan.analyses.tensorrt_ranges import OUTSIDE, REFORMAT_NAME, onnx_nodes


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
    by_kernels = (~by_name & (t["gpu_ops"].to_numpy() > 0)
                  & (t["reformat_kernel_ops"].to_numpy() == t["gpu_ops"].to_numpy())
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
    nodes = [onnx_nodes(s) for s in layer]
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


def layer_is_reformat(layers: pd.DataFrame) -> np.ndarray:
    """Per layer instance (``TensorRT.layers`` rows): a reformat by name, or every op it launched a
    format-conversion kernel (see the module docstring)."""
    if len(layers) == 0:
        return np.zeros(0, dtype=bool)
    by_name = category_mask(layers["layer"].astype("category"), lambda x: bool(REFORMAT_NAME.match(x)))
    ops = layers["gpu_ops"].to_numpy()
    return by_name | ((ops > 0) & (layers["reformat_kernel_ops"].to_numpy() == ops))
