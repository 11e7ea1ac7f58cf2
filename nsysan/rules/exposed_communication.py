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
stream (``async_op=True``, wait just before the result is needed) so compute can proceed.

Judged on the steady state per device (one-time collectives of set-up and warm-up are outside it).
When the export holds several ranks, the time a rank spent in a collective waiting for the last
rank to arrive is not this rule's: overlap cannot hide it, evening out the ranks can
(``rank-imbalance``). Fires when a device's exposed communication, less that waiting, is at least
``min_frac`` of its busy time and ``min_ns`` in total. Impact: that exposed time (what full overlap
would save at most: hidden communication still takes SMs and memory bandwidth from the compute
beside it), claimed as those wall-clock intervals so no other rule counts them again. Collective
types and the iteration breakdown are in the evidence.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from nsysan.analyses import intervals as iv
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
    parts, starts, ends, evidence = [], [], [], []
    worst_exposed = 0
    for _, r in busy.iterrows():
        dev = int(r["device_id"])
        comm, dev_busy = int(r["comm_ns"]), int(r["busy_ns"])
        if comm <= 0 or dev not in a.busy.per_dev:
            continue
        d = a.busy.per_dev[dev]  # merged once by the analysis: clipping keeps them merged
        cl = iv.subtract(iv.clip_merged(*d["comm"], w.start_ns, w.end_ns),
                         iv.clip_merged(*d["compute"], w.start_ns, w.end_ns))
        all_exposed = iv.total(*cl)
        waited = 0
        if a.ranks is not None and len(a.ranks.aligned):
            for pid in np.unique(a.comm.loc[a.comm["device_id"] == dev, "pid"].to_numpy()):
                cl = iv.subtract(cl, a.ranks.waiting(int(pid)))
            waited = all_exposed - iv.total(*cl)
        exposed = all_exposed - waited
        if exposed < min_ns or dev_busy <= 0 or exposed < min_frac * dev_busy:
            continue
        worst_exposed = max(worst_exposed, exposed)
        starts.append(cl[0])
        ends.append(cl[1])
        coll = a.collectives.loc[a.collectives["device_id"] == dev]
        kinds = ", ".join(f"{c['collective']} x{int(c['count'])} ({fmt_ns(c['exposed_ns'])} exposed of "
                          f"{fmt_ns(c['total_ns'])})" for _, c in coll.head(4).iterrows())
        none_hidden = comm - all_exposed <= 0.01 * comm
        wait_note = ""
        if waited:
            wait_note = (f", {fmt_ns(waited)} of that waiting for another rank to arrive ("
                         + ("rank-imbalance" if straggler else "see the ranks table") + f"), {fmt_ns(exposed)} moving data")
        parts.append(f"GPU {dev}: communication kernels ran {fmt_ns(comm)}, {fmt_ns(all_exposed)} of it "
                     f"({fmt_pct(all_exposed / comm)}) with no compute running on the device"
                     + (" (none of it overlapped)" if none_hidden else "") + wait_note + f": {kinds}")
        evidence += [{"device_id": dev, "collective": str(c["collective"]), "count": int(c["count"]),
                      "total_ns": int(c["total_ns"]), "exposed_ns": int(c["exposed_ns"])} for _, c in coll.iterrows()]
    if not parts:
        return
    cl = iv.merge(np.concatenate(starts), np.concatenate(ends))
    impact = iv.total(*cl)  # wall-clock: devices exposed at the same time save that time once
    per_it = a.comm_per_iteration
    per_it = per_it.loc[~per_it["warmup"].to_numpy(dtype=bool)] if len(per_it) else per_it
    it_note = ""
    if len(per_it) and a.iterations.range_name:
        p50 = int(np.median(per_it["comm_exposed_ns"].to_numpy()))
        it_note = (f" Per '{a.iterations.range_name}' iteration: {fmt_ns(p50)} exposed (p50) of an iteration "
                   f"time of {fmt_ns(a.iterations.stats.get('p50_ns'))}.")
    multi = f" On {len(parts)} devices at once, {fmt_ns(impact)} of wall-clock time." if len(parts) > 1 else ""
    if a.ranks is None or len(a.ranks.ranks) < 2:
        multi += (" Only one rank is in this export: part of this may be waiting for other ranks to arrive; "
                  "analyze every rank's export together (nsysan analyze rank*.sqlite --out-dir DIR) to split "
                  "waiting from transfer.")
    yield finding(
        ctx, "exposed-communication",
        severity=Severity.WARNING if worst_exposed >= 0.1 * w.dur_ns else Severity.INFO,
        impact_ns=impact, claims=claims_of(*cl),
        message="In the steady state: " + "; ".join(parts) + "." + multi + it_note,
        evidence=tuple(evidence))
