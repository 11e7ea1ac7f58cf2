"""The GPU is busy but its SMs are mostly idle: tiny kernels, few blocks, low occupancy (GPU metrics).

**Why it matters**: a kernel of a few blocks occupies a few of the GPU's SMs (132 on an H100) and
finishes in microseconds; a stream of them keeps the GPU "busy" on the timeline while most of its
compute stands idle. The work itself would take a fraction of that time spread over all SMs.

**Fix**: give each kernel more work: batch the small operations (one kernel over a stacked tensor
instead of one per item, ``torch._foreach_*``, grouped GEMMs), fuse chains of small kernels
(``torch.compile``, custom kernels), and replay the sequence as a CUDA Graph to remove the launch
gaps between them; check grid sizes and occupancy in Nsight Compute. The wording follows the
program (as recognised in the trace): grids and CUDA Graphs in C/C++, ``gang``/``collapse`` in OpenACC.

Measured per user NVTX range in the steady state (its instances' GPU spans, clipped to the window),
or, when no range qualifies, per kernel: GR active (the GPU had work) at least ``min_gr_pct`` and SMs
active under ``max_ratio`` x GR active, with at least ``min_samples`` samples; ranges that overlap
a range already judged are skipped (the longest first). Impact: per range, the GPU-busy time of its
kernels x (1 - SMs active / GR active) x ``assumed_saving_frac`` (0.5): the share of the busy time
the SMs were idle is the most that filling them could save, counted at half (fused or batched
kernels still ramp up and drain); claimed on those kernels. The launch gaps between the kernels
are ``launch-bound``'s (CPU launch cost), never counted here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from nsysan.analyses import intervals as iv
from nsysan.analyses.metrics import range_intervals, user_ranges
from nsysan.analyses.program import Program
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule
from nsysan.rules._metric_groups import group_ops, metric_rows
from nsysan.units import fmt_ns, fmt_pct


@rule("sms-mostly-idle", "GPU busy but its SMs mostly idle", min_gr_pct=5.0, max_ratio=0.4, min_samples=20,
      assumed_saving_frac=0.5)
def check(ctx: RuleContext, *, min_gr_pct: float, max_ratio: float, min_samples: int,
          assumed_saving_frac: float) -> Iterator[Finding]:
    gm = ctx.a.gpu_metrics
    if gm is None:
        return
    w, ops = ctx.window, ctx.a.ops
    if len(ops) == 0:
        return
    kern = np.asarray(ops["op"] == "kernel", dtype=bool) & np.asarray(ops["role"] == "compute", dtype=bool)
    o_s, o_e, o_dev = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64), ops["device_id"].to_numpy()
    ranges = user_ranges(ctx.a.nvtx_ranges)
    for d in gm.devices.to_dict("records"):
        dev = d["device_id"]
        if dev is None or dev != dev:
            continue
        dev = int(dev)
        units = []  # (name, starts, ends, means)
        for name, g in ranges:
            a, b = range_intervals(g)
            a, b = iv.clip_merged(a, b, w.start_ns, w.end_ns)
            if not len(a):
                continue
            m = gm.means(dev, a, b)
            if m is not None:
                units.append((f"range '{name}'", a, b, m))
        if not any(_idle(m, min_gr_pct, max_ratio, min_samples) for _, _, _, m in units):
            units = []
            k = metric_rows(ctx)
            for rec in (k.loc[k["device_id"] == dev].to_dict("records") if len(k) else []):
                a, b = group_ops(ctx, dev, "kernel", str(rec["group"]))
                units.append((f"kernel {str(rec['group'])[:120]}", *iv.merge(a, b), rec))
        chosen, taken = [], (np.empty(0, np.int64), np.empty(0, np.int64))
        for name, a, b, m in sorted(units, key=lambda u: -iv.total(u[1], u[2])):
            if not _idle(m, min_gr_pct, max_ratio, min_samples) or len(iv.intersect((a, b), taken)[0]):
                continue
            on = kern & (o_dev == dev)
            ks, ke = iv.merge(*iv.clip(o_s[on], o_e[on], w.start_ns, w.end_ns))
            bs, be = iv.intersect((ks, ke), (a, b))
            busy = iv.total(bs, be)
            if busy == 0:
                continue
            chosen.append((name, bs, be, m, busy))
            taken = iv.merge(np.concatenate([taken[0], a]), np.concatenate([taken[1], b]))
        if not chosen:
            continue
        est = sum(int(busy * (1 - m["sm_active"] / m["gr_active"]) * assumed_saving_frac) for _, _, _, m, busy in chosen)
        cs = np.concatenate([c[1] for c in chosen])
        ce = np.concatenate([c[2] for c in chosen])
        parts = [f"{name}: GPU busy {fmt_ns(busy)}, GR active {m['gr_active']:.0f}%, SMs active {m['sm_active']:.1f}% "
                 f"({m['samples']:,} samples)" for name, _, _, m, busy in chosen]
        yield finding(
            ctx, "sms-mostly-idle", severity=Severity.WARNING, impact_ns=est, claims=claims_of(cs, ce),
            suggestion=advice(ctx.program),
            message=f"GPU {dev}: while the GPU had work the SMs were mostly idle (SMs active under "
                    f"{fmt_pct(max_ratio)} of GR active) in {'; '.join(parts)}: tiny kernels or few blocks.",
            evidence=tuple({"unit": name, "busy_ns": int(busy), "samples": int(m["samples"]),
                            "coverage": m.get("coverage"), "gr_active": m["gr_active"], "sm_active": m["sm_active"],
                            "start_ns": int(a[0]), "end_ns": int(b[-1])}
                           for name, a, b, m, busy in chosen))


def _idle(m: Mapping[str, Any], min_gr: float, ratio: float, min_samples: int) -> bool:
    gr, sm = m.get("gr_active"), m.get("sm_active")
    return (m.get("samples") or 0) >= min_samples and gr is not None and sm is not None and gr == gr and sm == sm \
        and gr >= min_gr and sm < ratio * gr


TORCH_MORE_WORK = ("Give each kernel more work: batch the small operations (one op over a stacked tensor instead of "
                   "one per item, ``torch._foreach_*``{fused}, larger batches), fuse chains of small kernels "
                   "(``torch.compile``), and replay the sequence as a CUDA Graph "
                   "(``torch.compile(mode=\"reduce-overhead\")`` or ``torch.cuda.CUDAGraph``).")
ADVICE = Advice(
    torch_training=TORCH_MORE_WORK.format(fused=", ``fused=True`` optimizers"),
    torch=TORCH_MORE_WORK.format(fused=""),
    jax=("Give each kernel more work: ``jax.vmap`` over items instead of a Python loop, jit the whole step so "
         "XLA fuses the small ops, and batch more work per call."),
    cupy=("Give each kernel more work: operate on stacked arrays instead of one call per item, fuse chains with "
          "``@cupy.fuse``/``ElementwiseKernel``, and capture the sequence in a CUDA Graph "
          "(``cupy.cuda.Stream.begin_capture``)."),
    openacc=("Expose more parallelism per kernel: ``collapse(n)`` on nested loops, ``gang vector`` on the loop "
             "levels (check ``num_gangs``/``vector_length``: ``-Minfo=accel`` shows what the compiler chose), and "
             "merge small consecutive loops into one parallel region."),
    openmp=("Expose more parallelism per kernel: ``collapse(n)`` on nested loops, "
            "``teams distribute parallel for`` over the outer loops (check ``num_teams``/``thread_limit``), and "
            "merge small consecutive target "
            "regions into one."),
    default=("Give each kernel more work: launch enough blocks to fill every SM (grid-stride loops, a grid of at "
             "least a few blocks per SM), batch small operations into one launch, fuse chains of small kernels, "
             "and replay the sequence as a CUDA Graph (``cudaStreamBeginCapture``/``cudaGraphLaunch``); check "
             "occupancy in Nsight Compute."))


def advice(p: Program) -> str:
    """More work per kernel, in the program's terms."""
    return choose(ADVICE, p)
