"""Host-to-device copies and kernels run back to back instead of overlapping.

**Why it matters**: a GPU has copy engines that run beside its SMs. When every batch copies its
input and only then computes, the copy time adds to each iteration instead of hiding behind the
previous batch's compute.

**Fix**: use a copy stream and a compute stream with events (cudaEventRecord on the copy stream,
cudaStreamWaitEvent on the compute stream), double-buffer the device input, and prefetch batch i+1
while batch i computes; host memory must be pinned for the copy to be asynchronous. In the
program's own terms (as recognised in the trace): PyTorch side streams or DataLoader prefetching,
OpenACC/OpenMP ``async``/``nowait`` queues.

Impact: the HtoD copy time not already overlapped, capped by the compute time it could hide behind,
where a pageable copy counts at its time from pinned memory (``_copy_rates``: it cannot overlap
until pinned, and pinning shortens it: pageable-memcpy's saving), claimed on the head of each copy
(never counted twice with pageable-memcpy and sync-memcpy), and at most what the window gains with
those copies off the GPU's queue, replayed on the trace's own launch times (``_critical_path``): the
kernels behind a copy start no earlier than the host launched them, so a copy ahead of kernels the
host launches one by one saves only the part the launches do not fill. Every percentage is per device; one
finding for all devices, whose impact is the largest device's (devices copy at the same time: the
saving is wall-clock).
Fires when less than ``max_overlap_frac`` of the HtoD copy time overlaps compute.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from nsysan.analyses.frames import name_in
from nsysan.analyses.join import pack_keys
from nsysan.analyses.program import Program
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule
from nsysan.rules._copy_rates import ASSUMED_SPEEDUP, pinned_durations
from nsysan.rules._critical_path import saving, window_ops
from nsysan.units import fmt_ns, fmt_pct


@rule("serial-copy-compute", "Copies and compute do not overlap", max_overlap_frac=0.5, min_copy_ns=200_000)
def check(ctx: RuleContext, *, max_overlap_frac: float, min_copy_ns: int) -> Iterator[Finding]:
    ov = ctx.a.overlap
    rows = ov.loc[ov["direction"] == "HtoD"] if len(ov) else ov
    w = ctx.window
    parts, evidence, starts, ends = [], [], [], []
    estimate = 0
    replayed: dict[int, int] | None = None  # the replay only where a device's copies qualify (it reads every op)
    for _, r in rows.iterrows():
        if r["copy_ns"] < min_copy_ns or r["compute_ns"] == 0 or r["overlap_frac_of_copy"] >= max_overlap_frac:
            continue
        m = ctx.trace.memcpy
        cp = m.loc[(m["kind"] == "HtoD").to_numpy() & (m["device_id"] == r["device_id"]).to_numpy()
                   & (m["start_ns"] < w.end_ns).to_numpy() & (m["end_ns"] > w.start_ns).to_numpy()]
        # a pageable copy overlaps nothing until pinned: what can hide behind compute is the pinned
        # copy's time (_copy_rates), the head of each copy; the rest is pageable-memcpy's saving
        pin = pinned_durations(ctx, cp, ASSUMED_SPEEDUP)
        hideable = int(r["copy_ns"]) - int((cp["dur_ns"].to_numpy() - pin).sum())
        hidden = int(max(0, min(hideable - r["overlap_ns"], r["compute_ns"] - r["overlap_ns"])))
        if replayed is None:
            replayed = _replayed(ctx)
        estimate = max(estimate, min(hidden, replayed.get(int(r["device_id"]), 0)))
        starts.append(cp["start_ns"].to_numpy())
        ends.append(cp["start_ns"].to_numpy() + pin)
        parts.append(f"Device {int(r['device_id'])}: {fmt_ns(r['copy_ns'])} of host-to-device copies and "
                     f"{fmt_ns(r['compute_ns'])} of compute in the {w.label}, only "
                     f"{fmt_pct(r['overlap_frac_of_copy'])} of the copy time overlapped compute")
        evidence.append({"device_id": int(r["device_id"]), "copy_ns": int(r["copy_ns"]),
                         "compute_ns": int(r["compute_ns"]), "overlap_ns": int(r["overlap_ns"])})
    if not parts:
        return
    # devices copy at once: the saving is the largest device's, claimed on the union of the copies
    yield finding(ctx, "serial-copy-compute", severity=Severity.WARNING, impact_ns=estimate,
                  suggestion=advice(ctx.program),
                  claims=claims_of(np.concatenate(starts), np.concatenate(ends)),
                  message="; ".join(parts) + ".", evidence=tuple(evidence))


def _replayed(ctx: RuleContext) -> dict[int, int]:
    """Per device, what the window saves with its host-to-device copies off the GPU's queue (a
    pageable one keeps what it takes over its pinned time: pageable-memcpy's part), by the replay of
    ``_critical_path``: the kernels after a copy start no earlier than they were launched."""
    rows = window_ops(ctx)
    ops = ctx.a.ops
    read = ("op", "kind", "dur_ns", "bytes", "device_id", "pid", "correlation_id")  # the columns used, not all
    o = ops[[c for c in read if c in ops.columns]].iloc[rows]
    h2d = (name_in(o["op"], ("memcpy",)) & name_in(o["kind"], ("HtoD",))) if len(o) else np.zeros(0, bool)
    new = o["dur_ns"].to_numpy(np.int64).copy()
    if h2d.any():
        cp = o.loc[h2d].assign(host_mem=_host_mem(ctx, o.loc[h2d]))
        new[h2d] = cp["dur_ns"].to_numpy(np.int64) - pinned_durations(ctx, cp, ASSUMED_SPEEDUP)
    return saving(ctx, rows, new)


def _host_mem(ctx: RuleContext, copies: pd.DataFrame) -> np.ndarray:
    """The host memory of these copies (ops rows), from the memcpy table by process and correlation id."""
    m = ctx.trace.memcpy
    keys = pack_keys(m["pid"].to_numpy(), m["correlation_id"].to_numpy())
    order = np.argsort(keys, kind="stable")
    want = pack_keys(copies["pid"].to_numpy(), copies["correlation_id"].to_numpy())
    pos = np.clip(np.searchsorted(keys[order], want), 0, max(len(keys) - 1, 0))
    hm = m["host_mem"].astype(str).to_numpy()
    found = (keys[order][pos] == want) if len(keys) else np.zeros(len(want), bool)
    return np.where(found, hm[order][pos], "Pinned") if len(keys) else np.full(len(want), "Pinned")


TORCH_OVERLAP = ("issues ``x.to(device, non_blocking=True)`` under ``with torch.cuda.stream(copy_stream):`` from "
                 "pinned memory, then ``torch.cuda.current_stream().wait_stream(copy_stream)`` and "
                 "``x.record_stream(torch.cuda.current_stream())`` before use; double-buffer the inputs.")
ADVICE = Advice(
    torch_training=("Prefetch the next batch while this one computes: ``DataLoader(pin_memory=True, num_workers>0)`` "
                    "and a prefetcher that " + TORCH_OVERLAP),
    torch="Copy the next input while this one computes: " + TORCH_OVERLAP,
    jax=("Prefetch the next batch to the device while the step runs: ``jax.device_put`` it before calling the "
         "jitted step (JAX dispatch is asynchronous), e.g. ``flax.jax_utils.prefetch_to_device(it, 2)``."),
    cupy=("Copy on a second ``cupy.cuda.Stream`` from pinned host arrays (``cupyx.empty_pinned``) while the "
          "compute stream runs, ordering them with ``cupy.cuda.Event`` (``record`` / ``stream.wait_event``); "
          "double-buffer the device inputs."),
    openacc=("Overlap the transfers with compute on separate async queues: ``#pragma acc update device(next) "
             "async(2)`` while ``#pragma acc parallel loop async(1)`` works on the current block, ``#pragma acc "
             "wait(2) async(1)`` to order them; double-buffer the blocks."),
    openmp=("Overlap the transfers with compute: ``#pragma omp target update to(next) nowait depend(out: next)`` "
            "while a ``target ... nowait depend(in: cur)`` region computes the current block; double-buffer the "
            "blocks."),
    default=("Use a copy stream and a compute stream with events (cudaEventRecord on the copy stream, "
             "cudaStreamWaitEvent on the compute stream), double-buffer the device input, and prefetch batch i+1 "
             "while batch i computes; the host memory must be pinned (cudaMallocHost) for the copy to be "
             "asynchronous."))


def advice(p: Program) -> str:
    """Copy/compute overlap in the program's terms."""
    return choose(ADVICE, p)
