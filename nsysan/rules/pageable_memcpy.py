"""Copies to or from pageable host memory.

**Why it matters**: the driver stages pageable copies through an internal pinned buffer in chunks,
so they run at a fraction of the link's bandwidth, block the host, and cannot overlap compute.
(nsys analyze: cuda_memcpy_async.) Memory kinds come from the export's own enum (0 = pageable,
1 = pinned), not CUPTI's numbering.

**Fix**: allocate host buffers as pinned memory, in the program's own terms (as recognised in the trace):
cudaHostAlloc / cudaMallocHost or cudaHostRegister (C/C++), then cudaMemcpyAsync; in PyTorch
``DataLoader(pin_memory=True)`` (training) or a pinned staging tensor reused per batch (inference);
CuPy ``cupyx.empty_pinned``; OpenACC/OpenMP data regions and ``-gpu=pinned``.

Impact: the copies' GPU time minus the time each would take from pinned memory (``_copy_rates``:
the pinned throughput measured in this trace for that direction, else the GPU's PCIe link, about
53 GB/s on Gen5 where pageable copies ran 9-11 GB/s in this project's H200 ladder, else
``assumed_speedup`` x the pageable throughput of the copies over 64 KiB; copies all of 64 KiB or
less are latency with no rate: the message says so, and each counts as the latency floor), claimed
on the tail of each copy (its head, the pinned copy's time, is what serial-copy-compute can hide:
the two never count the same time).
"""

from __future__ import annotations

from collections.abc import Iterator

from nsysan.analyses.program import Program
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule, top_records
from nsysan.rules._copy_rates import (
    SMALL_COPY_BYTES,
    fallback_rate,
    has_rate,
    latency_floor,
    pinned_durations,
    pinned_rate,
)
from nsysan.rules._window import steady
from nsysan.rules._wording import call_sites
from nsysan.units import fmt_bytes, fmt_ns, fmt_rate


@rule("pageable-memcpy", "Copies use pageable host memory", min_total_ns=100_000, assumed_speedup=2.0)
def check(ctx: RuleContext, *, min_total_ns: int, assumed_speedup: float) -> Iterator[Finding]:
    m = steady(ctx.trace.memcpy, ctx)
    pageable = m.loc[(m["host_mem"] == "Pageable") & m["kind"].isin(["HtoD", "DtoH"])]
    if len(pageable) == 0 or int(pageable["dur_ns"].sum()) < min_total_ns:
        return
    # each copy's time from pinned memory (_copy_rates: the trace's pinned copies, else the GPU's link)
    pin = pinned_durations(ctx, pageable, assumed_speedup)
    kinds = pageable["kind"].astype(str).to_numpy()
    impact, notes = 0, []
    for kind, g in pageable.groupby(pageable["kind"].astype(str)):
        dur, nbytes = int(g["dur_ns"].sum()), int(g["bytes"].sum())
        est = int(pin[kinds == kind].sum())
        impact += max(0, dur - est)
        head = f"{kind}: {len(g)} copies, {fmt_bytes(nbytes)} in {fmt_ns(dur)}"
        if not has_rate(g["bytes"]):
            # all latency: bytes over time is no rate ("0.00 GB/s"), and the model divides by none
            notes.append(f"{head} (none over {SMALL_COPY_BYTES >> 10} KiB: too small to have a meaningful "
                         f"transfer rate; pinned, each would still take the per-copy latency, counted as the shortest "
                         f"such copy's {fmt_ns(latency_floor(ctx, kind))})")
            continue
        page_rate = nbytes / (dur / 1e9) if dur else 0.0
        rate, basis = pinned_rate(ctx, kind, g["device_id"].unique())
        if rate is None:
            rate = fallback_rate(g["bytes"], g["dur_ns"], assumed_speedup)
            basis = f"assumed {assumed_speedup:g}x"
            if int(g["bytes"].min()) <= SMALL_COPY_BYTES and rate is not None:  # the rate is the large ones'
                basis = f"{fmt_rate(rate / assumed_speedup)} over {SMALL_COPY_BYTES >> 10} KiB; {basis}"
        notes.append(f"{head} ({fmt_rate(page_rate)}; {basis} rate {fmt_rate(rate)})")
    yield finding(ctx, "pageable-memcpy", severity=Severity.WARNING, impact_ns=impact,
                  # the tail of each copy: its head, the pinned copy's time, is serial-copy-compute's
                  claims=claims_of(pageable["start_ns"].to_numpy() + pin, pageable["end_ns"]),
                  suggestion=advice(ctx.program),
                  message=f"Pageable host memory in the {ctx.window.label}: " + "; ".join(notes) + "."
                          + call_sites(ctx, None, correlation=zip(pageable["pid"].tolist(),
                                                                  pageable["correlation_id"].tolist())),
                  evidence=top_records(pageable.assign(kind=pageable["kind"].astype(str)), "dur_ns", 10,
                                       ["kind", "bytes", "start_ns", "dur_ns", "stream_id"]))


ADVICE = Advice(
    torch_training=("Pin the batches: ``DataLoader(..., pin_memory=True)`` (with ``num_workers`` > 0) and copy with "
                    "``batch.to(device, non_blocking=True)``; tensors built outside a DataLoader: "
                    "``tensor.pin_memory()`` once, not per step."),
    torch=("Copy through pinned memory: allocate a staging tensor once with ``torch.empty(shape, dtype=..., "
           "pin_memory=True)``, ``copy_`` each input into it and send it with ``.to(device, non_blocking=True)`` "
           "(``tensor.pin_memory()`` makes a new pinned copy each call: do it once, not per batch)."),
    jax=("Stage inputs in pinned host memory "
         "(``jax.device_put(x, sharding.with_memory_kind(\"pinned_host\"))``) "
         "and prefetch the next batch to the device while the current step runs (``jax.device_put`` ahead of "
         "use; ``flax.jax_utils.prefetch_to_device``)."),
    cupy=("Use pinned host arrays: ``cupyx.empty_pinned(shape, dtype)`` (or ``cupy.cuda.alloc_pinned_memory``) "
          "allocated once, then ``cupy_array.set(host, stream=s)`` / ``cupy.asarray`` on a non-default stream."),
    openacc=("Keep the arrays on the device across the loop with a data region (``#pragma acc data copyin(...) "
             "copyout(...)`` around it, or ``#pragma acc enter data`` once) and move only what changes with "
             "``#pragma acc update ... async``; compile with ``-gpu=pinned`` (nvc/nvfortran) so the host arrays "
             "are pinned."),
    openmp=("Keep the arrays on the device across the loop (``#pragma omp target data map(...)`` around it, or "
            "``target enter data`` once) and move only what changes with ``#pragma omp target update``; with nvc, "
            "``-gpu=pinned`` pins the host arrays."),
    default=("Allocate the host buffers as pinned memory once (``cudaMallocHost``/``cudaHostAlloc``, or "
             "``cudaHostRegister`` on an existing buffer) and copy with ``cudaMemcpyAsync`` on a non-default "
             "stream."))


def advice(p: Program) -> str:
    """Pinned host memory in the program's terms: no DataLoader advice for a C++ or OpenACC program."""
    return choose(ADVICE, p)
