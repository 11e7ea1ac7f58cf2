"""Communication kernels run while no compute runs on the GPU: the collectives are exposed.

**Why it matters**: a collective (NCCL all-reduce, all-gather, reduce-scatter ...) that runs with
no compute beside it adds its whole duration to every step; the same transfer hidden under compute
(the backward pass of the next layers, the forward of the next micro-batch) costs nothing on the
device's critical path. Gradient all-reduce issued after the whole backward pass, a manual
``all_reduce`` loop after ``loss.backward()``, or a communication stream that waits on compute are
the usual causes.

**Fix**: let the framework overlap communication with compute: PyTorch DDP all-reduces gradient
buckets during backward (tune ``bucket_cap_mb``; do not all-reduce gradients by hand after
backward; use ``no_sync()`` only to skip the all-reduce of gradient-accumulation steps); FSDP with
``backward_prefetch=BACKWARD_PRE`` and ``forward_prefetch=True``; issue collectives on their own
stream (``async_op=True``, wait just before the result is needed) so compute can proceed. The
suggestion follows the program and its collectives (``analyses/program.py``): DDP buckets for a
PyTorch training all-reduce, FSDP prefetch for all-gathers and reduce-scatters, micro-batches for a
pipeline's sends and receives, tensor-parallel overlap for all-reduces inside an inference forward
pass, NCCL streams and groups for a C/C++ program.

Judged on the steady state per device (one-time collectives of set-up and warm-up are outside it).
When the export holds several ranks and one is named a straggler, the time the others spent in a
collective waiting for it to arrive is not this rule's: evening out the ranks saves it
(``rank-imbalance``); nor is waiting in point-to-point transfers (a pipeline's dependency, its
bubble). When no straggler is named (ranks in step, taking turns to arrive last), the waiting in
collectives stays in: it is exposed communication that overlap would hide. Fires when a device's
exposed communication (less that waiting) is at least ``min_frac`` of its busy time and ``min_ns``
in total. Impact: that exposed time, at most the device's compute time in the window (overlap hides
communication under compute that exists: at best a step takes the longer of the two, so a program of
collectives alone has nothing to overlap), (what full overlap would save at most: hidden communication
still takes SMs and memory bandwidth from the compute beside it), wall-clock over the devices and at
most the most exposed device's (the ranks of a job move together), claimed as those wall-clock
intervals so no other rule counts them again. The message's per-device totals are those of the
collectives table (every type listed, the window rule of ``analyses/comm.py``: clipped to the
steady state), the wall-clock time when kernels ran at once on several streams; per iteration it
gives each rank's exposed time (its period, ``comm_per_iteration``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from nsysan.analyses import intervals as iv
from nsysan.analyses.program import Program
from nsysan.analyses.program import of as program_of
from nsysan.rules._base import Finding, Severity, claims_of, finding, rule
from nsysan.rules._helpers import has_gpu_activity
from nsysan.units import fmt_ns, fmt_pct


@rule("exposed-communication", "Communication not hidden under compute", min_frac=0.05, min_ns=100_000)
def check(ctx: Any, *, min_frac: float, min_ns: int) -> Iterator[Finding]:
    a = ctx.a
    w = ctx.window
    if not has_gpu_activity(ctx) or len(a.comm) == 0 or w.dur_ns <= 0:
        return
    busy = a.busy_steady
    straggler = a.ranks is not None and a.ranks.straggler is not None
    per_it = a.comm_per_iteration
    per_it = per_it.loc[~per_it["warmup"].to_numpy(dtype=bool)] if len(per_it) else per_it
    parts, starts, ends, evidence = [], [], [], []
    kinds_seen: set[str] = set()
    worst_exposed = 0
    for _, r in busy.iterrows():
        dev = int(r["device_id"])
        wall, dev_busy = int(r["comm_ns"]), int(r["busy_ns"])
        if wall <= 0 or dev not in a.busy.per_dev:
            continue
        d = a.busy.per_dev[dev]  # merged once by the analysis: clipping keeps them merged
        pids = np.unique(a.comm.loc[a.comm["device_id"] == dev, "pid"].to_numpy())
        cl, all_exposed, waited, waited_p2p = _exposed(a, d, w, pids, straggler)
        exposed = all_exposed - waited
        if exposed < min_ns or dev_busy <= 0 or exposed < min_frac * dev_busy:
            continue
        # overlap hides communication under compute that exists: at best the step takes the longer of
        # the two, so the saving is at most the device's compute in the window (an NCCL benchmark
        # with no compute kernel has nothing to overlap with)
        compute_ns = iv.total(*iv.clip_merged(*d["compute"], w.start_ns, w.end_ns))
        if min(exposed, compute_ns) < min_ns:
            continue
        worst_exposed = max(worst_exposed, min(exposed, compute_ns))
        kinds_seen.update(a.collectives.loc[a.collectives["device_id"] == dev, "collective"].astype(str))
        cap_note = (f"; only {fmt_ns(compute_ns)} of compute ran on the device to hide it under"
                    if compute_ns < exposed else "")
        starts.append(cl[0])
        ends.append(cl[1])
        coll = a.collectives.loc[a.collectives["device_id"] == dev]
        parts.append(_device_part(a, dev, coll, wall, all_exposed, (waited, waited_p2p, exposed), pids, per_it,
                                  cap_note))
        evidence += [{"device_id": dev, "collective": str(c["collective"]), "count": int(c["count"]),
                      "total_ns": int(c["total_ns"]), "exposed_ns": int(c["exposed_ns"])} for _, c in coll.iterrows()]
    if not parts:
        return
    cl = iv.merge(np.concatenate(starts), np.concatenate(ends))
    # wall-clock: devices exposed at the same time save that time once; and the ranks move together,
    # so the job saves at most what the most exposed device would (its skew to the others is not saved)
    wall = iv.total(*cl)
    impact = min(wall, worst_exposed)
    it_note = (f" Iteration time p50: {fmt_ns(a.iterations.stats.get('p50_ns'))}."
               if len(per_it) and a.iterations.range_name else "")
    multi = (f" On {len(parts)} devices: {fmt_ns(wall)} of wall-clock time, {fmt_ns(worst_exposed)} on the most "
             "exposed one (what the job can save: its ranks move together)." if len(parts) > 1 else "")
    if a.ranks is None or len(a.ranks.ranks) < 2:
        multi += (" Only one rank is in this export: part of this may be waiting for other ranks to arrive; "
                  "analyze every rank's export together (nsysan analyze rank*.sqlite --out-dir DIR) to split "
                  "waiting from transfer.")
    yield finding(
        ctx, "exposed-communication",
        severity=Severity.WARNING if worst_exposed >= 0.1 * w.dur_ns else Severity.INFO,
        impact_ns=impact, claims=claims_of(*cl), suggestion=advice(program_of(a), kinds_seen),
        message=f"In the {w.label}: " + "; ".join(parts) + "." + multi + it_note,
        evidence=tuple(evidence))


def _exposed(a: Any, d: dict[str, Any], w: Any, pids: np.ndarray,
             straggler: bool) -> tuple[tuple[np.ndarray, np.ndarray], int, int, int]:
    """A device's communication with no compute beside it in the window ``w``, less the waiting
    that is not overlap's to hide: (those intervals, all exposed ns, waited ns, of which in
    point-to-point transfers). ``d``: the device's merged busy intervals by kind."""
    cl = iv.subtract(iv.clip_merged(*d["comm"], w.start_ns, w.end_ns),
                     iv.clip_merged(*d["compute"], w.start_ns, w.end_ns))
    all_exposed = iv.total(*cl)
    waited = waited_p2p = 0
    if a.ranks is not None and len(a.ranks.aligned):
        for pid in pids:  # point-to-point waiting is the pipeline's dependency (its bubble), not overlap's
            cl = iv.subtract(cl, a.ranks.waiting(int(pid), p2p=True))
        waited_p2p = all_exposed - iv.total(*cl)
        for pid in pids:
            if straggler and int(pid) != int(a.ranks.straggler["pid"]):  # waiting for it: rank-imbalance's
                cl = iv.subtract(cl, a.ranks.waiting(int(pid), p2p=False))
        waited = all_exposed - iv.total(*cl)
    return cl, all_exposed, waited, waited_p2p


def _device_part(a: Any, dev: int, coll: Any, wall: int, all_exposed: int, waits: tuple[int, int, int],
                 pids: np.ndarray, per_it: Any, cap_note: str) -> str:
    """The message's part for one device. ``coll``: the device's rows of the collectives table;
    ``waits``: (waited, in point-to-point, exposed); ``cap_note``: the compute cap's note, or ""."""
    waited, waited_p2p, exposed = waits
    comm, comm_exp = int(coll["total_ns"].sum()), int(coll["exposed_ns"].sum())  # the table's totals
    kinds = ", ".join(f"{c['collective']} x{int(c['count'])} ({fmt_ns(c['exposed_ns'])} exposed of "
                      f"{fmt_ns(c['total_ns'])})" for _, c in coll.iterrows())
    none_hidden = comm - comm_exp <= 0.01 * comm
    concurrent = ""
    if abs(wall - comm) > 0.01 * max(comm, 1) or abs(all_exposed - comm_exp) > 0.01 * max(comm_exp, 1):
        concurrent = (f" (kernels ran at once on several streams: {fmt_ns(wall)} of wall-clock time, "
                      f"{fmt_ns(all_exposed)} of it exposed)")
    wait_note = ""
    if waited:
        whom = [f"{fmt_ns(waited - waited_p2p)} for rank {a.ranks.straggler['rank']} to arrive (rank-imbalance)"
                if waited > waited_p2p else "",
                f"{fmt_ns(waited_p2p)} for the peer of a point-to-point transfer (the pipeline's dependency)"
                if waited_p2p else ""]
        wait_note = ("; of the exposed time, waiting: " + ", ".join(w for w in whom if w)
                     + f"; {fmt_ns(exposed)} the rest")
    it_note = ""
    mine = per_it.loc[np.isin(per_it["pid"].to_numpy(), pids)] if len(per_it) else per_it
    if len(mine) and a.iterations.range_name:
        p50s = [fmt_ns(int(np.median(g["comm_exposed_ns"].to_numpy())))
                + (f" (pid {int(p)})" if len(pids) > 1 else "") for p, g in mine.groupby("pid", sort=True)]
        it_note = f"; per '{a.iterations.range_name}' iteration (its period): " + ", ".join(p50s) + " exposed (p50)"
    return (f"GPU {dev}: communication kernels ran {fmt_ns(comm)}, {fmt_ns(comm_exp)} of it "
            f"({fmt_pct(comm_exp / comm if comm else 0)}) with no compute running on the device"
            + (" (none of it overlapped)" if none_hidden else "") + concurrent + f": {kinds}"
            + wait_note + cap_note + it_note)


def advice(p: Program, kinds: set[str]) -> str:
    """How to hide these collectives, for this program and these collectives."""
    p2p = bool(kinds) and kinds <= {"SendRecv", "Send", "Recv"}
    sharded = bool(kinds & {"AllGather", "ReduceScatter"})
    if not p.torch and not p.jax:
        return ("Overlap the collectives with independent compute: enqueue them on their own CUDA stream "
                "(``ncclAllReduce(..., comm, comm_stream)``, several in one ``ncclGroupStart``/``ncclGroupEnd``), "
                "make the compute stream wait on a ``cudaEventRecord`` of the communication stream only where the "
                "result is used, and split the work so the next chunk computes while this one communicates.")
    if p.jax:
        return ("Let XLA overlap the collectives: shard with ``jax.jit`` and ``NamedSharding`` so the compiler "
                "schedules them asynchronously (``--xla_gpu_enable_latency_hiding_scheduler=true`` in ``XLA_FLAGS``), "
                "and pipeline micro-batches so communication of one overlaps compute of the next.")
    if p2p:
        return ("A pipeline's sends and receives are exposed when stages wait for each other: more micro-batches per "
                "step (the bubble shrinks as (stages-1)/(micro-batches+stages-1)), an interleaved 1F1B schedule, and "
                "``isend``/``irecv`` issued ahead of the compute that needs them.")
    if sharded:
        return ("Prefetch the shards: FSDP with ``backward_prefetch=BackwardPrefetch.BACKWARD_PRE`` and "
                "``forward_prefetch=True`` (FSDP2: ``reshard_after_forward`` and explicit prefetching), and enough "
                "compute per unit (wrap larger modules) for an all-gather or reduce-scatter to hide under.")
    if p.training:
        return ("Let DDP overlap the gradient all-reduce with the backward pass: buckets all-reduce as their "
                "gradients are ready (tune ``bucket_cap_mb``; do not all-reduce gradients by hand after "
                "``loss.backward()``; ``no_sync()`` only for the non-final micro-batches of gradient accumulation); "
                "for all-reduces in the forward pass (tensor parallelism), overlap them with the next layer's "
                "compute (async tensor parallelism, sequence parallelism).")
    return ("All-reduces inside the forward pass (tensor parallelism) sit on the critical path: overlap them with "
            "independent compute (async tensor parallelism, issuing the collective with ``async_op=True`` and "
            "waiting just before the result is used), or use fewer, larger collectives (fused all-reduce, fewer "
            "tensor-parallel ranks for a small model).")
