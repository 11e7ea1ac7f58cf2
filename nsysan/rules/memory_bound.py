"""Kernels bound by DRAM bandwidth, with the tensor cores idle (GPU metrics).

**Why it matters**: a kernel that streams memory near the DRAM's peak bandwidth cannot run faster by
computing faster: only moving fewer bytes helps. Elementwise chains that each read and write a whole
tensor are the common case.

**Fix**: move fewer bytes: fuse elementwise chains so the data crosses DRAM once (``torch.compile``,
fused optimizers and activations, custom fused kernels; in C/C++ or OpenACC, one kernel or loop
where there were several), keep activations in BF16/FP16 instead of FP32 (half the bytes), and
avoid materialising intermediates. The wording follows the program (as recognised in the trace).

Measured: the GPU metric samples taken while each kernel ran in the steady state (samples whose
period lies inside the kernel's runs) show DRAM read + write at least ``min_dram_pct`` of the peak
bandwidth with tensor active under 10%; at least ``min_samples`` samples per kernel and
``min_share`` of the steady window. The same test on each user NVTX range's own kernels (the kernels
launched inside its instances, ``metrics.range_kernels``) names the range, with its DRAM read and
write shares: the innermost such ranges (least kernel time first; a range whose kernels overlap one
already named, such as the iteration around a memory-bound phase, is not named again), each with at
least ``min_share`` of the window in measured kernels. A memory-bound range fires the rule even when
none of the top kernels does (many different kernels), with no estimate. Impact: for the kernels
whose names say FP32 (``float``, ``f32`` and no ``half``/``bf16``/``fp16``), ``assumed_saving_frac``
(0.25) of their wall-clock time: BF16 halves the bytes a memory-bound kernel moves and so its time,
counted at half that, as ``fp32-compute`` counts; claimed on those kernels. Kernels already in
reduced precision: no estimate (how much fusing saves depends on how many passes fuse, which the
trace does not say): impact 0.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.gpu import Window
from nsysan.analyses.program import Program
from nsysan.rules._advice import TORCH_BF16, TORCH_HALF, Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule
from nsysan.rules._metric_groups import evidence, group_ops, metric_rows, union
from nsysan.units import fmt_ns, fmt_pct

FP32 = re.compile(r"\bfloat\b|f32|fp32", re.IGNORECASE)
REDUCED = re.compile(r"half|bfloat16|bf16|fp16|f16|__nv_fp8|fp8|int8", re.IGNORECASE)


@rule("memory-bound", "Kernels bound by DRAM bandwidth", min_dram_pct=60.0, max_tensor_pct=10.0, min_samples=20,
      min_share=0.02, assumed_saving_frac=0.25)
def check(ctx: RuleContext, *, min_dram_pct: float, max_tensor_pct: float, min_samples: int, min_share: float,
          assumed_saving_frac: float) -> Iterator[Finding]:
    k = metric_rows(ctx, ("kernel", "range"))
    if len(k) == 0:
        return
    dram = k["dram_read"].to_numpy(np.float64) + k["dram_write"].to_numpy(np.float64)
    t = k["tensor_active"].to_numpy(np.float64)
    hit = k.loc[(dram >= min_dram_pct) & ~(t >= max_tensor_pct) & (k["samples"].to_numpy() >= min_samples)]
    w = ctx.window
    for dev, both in hit.groupby("device_id", sort=True):
        rows = both.loc[both["kind"] == "kernel"]
        spans = {str(g): group_ops(ctx, int(dev), "kernel", str(g)) for g in rows["group"]}
        named = ranges_named(ctx, int(dev), both.loc[both["kind"] == "range"], min_share * w.dur_ns)
        wall = iv.total(*union(list(spans.values()) + [sp for _, sp in named]))
        if wall == 0 or wall < min_share * w.dur_ns:
            continue
        fp32 = [g for g in spans if FP32.search(g) and not REDUCED.search(g)]
        fs, fe = union([spans[g] for g in fp32])
        fwall = iv.total(fs, fe)
        saving = (f" {len(fp32)} of them compute in FP32 ({fmt_ns(fwall)}): BF16 would halve their bytes."
                  if fp32 else " They already use reduced precision: only fusing saves time, by an amount the trace "
                               "cannot tell (no estimate)." if len(rows) else " No time estimate: the trace does not "
                               "say how many passes would fuse.")
        where = [f"'{r['group']}'" for r, _ in named]
        yield finding(
            ctx, "memory-bound", severity=Severity.WARNING if fp32 else Severity.INFO,
            impact_ns=int(fwall * assumed_saving_frac), claims=claims_of(fs, fe) if fp32 else None,
            suggestion=(f"In range {', '.join(where)}, m" if where else "M") + advice(ctx.program)[1:],
            message=f"GPU {int(dev)}: " + "".join(range_sentence(r, sp, w) for r, sp in named)
                    + kernel_sentence(rows, spans, w, bool(named)) + saving,
            evidence=evidence(pd.DataFrame([r for r, _ in named] + rows.sort_values("busy_ns", ascending=False)
                                           .to_dict("records")),
                              ("kind", "group", "ops", "busy_ns", "samples", "coverage", "dram_read", "dram_write",
                               "sm_active", "tensor_active")))


def ranges_named(ctx: RuleContext, dev: int, rows: pd.DataFrame, min_ns: float) -> list[tuple[dict[str, Any], Any]]:
    """The memory-bound ranges to name (``by_kernel`` rows of kind ``range``: each range's own kernels),
    innermost first: the ones with the least kernel time, a range whose kernels overlap one already
    named left out (the iteration around a memory-bound phase is not named again), and ranges whose
    measured kernels take under ``min_ns``."""
    out: list[tuple[dict[str, Any], Any]] = []
    for r in rows.sort_values(["busy_ns", "group"], kind="stable").to_dict("records"):
        sp = group_ops(ctx, dev, "range", str(r["group"]))
        if iv.total(*sp) < max(min_ns, 1) or any(iv.total(*iv.intersect(sp, o)) for _, o in out):
            continue
        out.append((r, sp))
    return out


def range_sentence(r: dict[str, Any], sp: tuple[np.ndarray, np.ndarray], w: Window) -> str:
    busy = iv.total(*sp)
    return (f"range '{r['group']}' streams memory at {float(r['dram_read']) + float(r['dram_write']):.0f}% of the "
            f"DRAM's peak bandwidth (read {float(r['dram_read']):.0f}% + write {float(r['dram_write']):.0f}%) with the "
            f"tensor cores idle ({float(r['tensor_active']):.0f}%) over its {int(r['ops']):,} kernels' {fmt_ns(busy)} "
            f"in the {w.label} ({fmt_pct(busy / w.dur_ns)}; {int(r['samples']):,} GPU-metric samples): memory-bound. ")


def kernel_sentence(rows: pd.DataFrame, spans: dict[str, Any], w: Window, ranges: bool) -> str:
    if len(rows) == 0:
        return ""
    wall = iv.total(*union(list(spans.values())))
    d = float(np.average(rows["dram_read"] + rows["dram_write"], weights=rows["samples"]))
    if ranges:
        return f"Memory-bound kernels in the {w.label}: {len(rows)}, {fmt_ns(wall)} at {d:.0f}% of peak."
    return (f"{len(rows)} kernel(s) ran {fmt_ns(wall)} ({fmt_pct(wall / w.dur_ns)} of the {w.label}) with DRAM "
            f"read + write at {d:.0f}% of peak bandwidth and the tensor cores idle "
            f"({int(rows['samples'].sum()):,} GPU-metric samples): memory-bound.")


TORCH_FEWER_BYTES = ("Move fewer bytes: fuse the elementwise chains so the data crosses DRAM once (``torch.compile``, "
                     "fused activations and norms), {prec}, and avoid redundant passes over the same data "
                     "(materialised intermediates, extra ``.contiguous()``/``.clone()``/``.float()`` copies of whole "
                     "tensors).")
DIRECTIVES = ("Move fewer bytes: fuse the loops that stream the same arrays into one parallel region (one pass over "
              "the data instead of several), keep temporaries in registers instead of arrays, and use single "
              "precision (``float``/``real(4)``) where double is not needed.")
ADVICE = Advice(
    torch_training=TORCH_FEWER_BYTES.format(
        prec=f"train in BF16 ({TORCH_BF16}) so activations take half the bytes, and use fused optimizers "
             "(``torch.optim.AdamW(..., fused=True)``)"),
    torch_inference=TORCH_FEWER_BYTES.format(
        prec=f"run in half precision ({TORCH_HALF}) so activations take half the bytes"),
    torch=TORCH_FEWER_BYTES.format(prec="keep activations in BF16/FP16 (``torch.autocast``): half the bytes"),
    jax=("Move fewer bytes: keep the work inside one ``jax.jit`` so XLA fuses the elementwise chains, compute "
         "in BF16 (``jnp.bfloat16`` activations: half the bytes), and avoid redundant passes over the same "
         "data (intermediates materialised between jitted calls)."),
    cupy=("Move fewer bytes: fuse elementwise chains with ``@cupy.fuse`` or ``cupy.ElementwiseKernel`` so the "
          "data crosses DRAM once, use ``cupy.float16`` arrays where precision allows, and avoid redundant "
          "passes over the same arrays (temporaries, copies)."),
    openacc=DIRECTIVES,
    openmp=DIRECTIVES,
    default=("Move fewer bytes: fuse elementwise kernels so the data crosses DRAM once (no redundant passes), "
             "keep temporaries in registers or shared memory instead of global arrays, load vectors (``float4``, "
             "``__half2``/``__nv_bfloat162``), and store in ``__half``/``__nv_bfloat16`` where precision allows "
             "(half the bytes)."))


def advice(p: Program) -> str:
    """Fewer bytes, in the program's terms."""
    return choose(ADVICE, p)
