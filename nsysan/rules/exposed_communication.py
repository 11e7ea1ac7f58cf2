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
suggestion follows the program and its collectives (as recognised in the trace): DDP buckets for a
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
in total, and what overlapping it would save (below) is at least ``min_ns``.

**Saving: overlap is not free.** A collective's kernel holds SMs (NCCL: one CTA per channel, e.g.
24 of an H200's 132), and the compute kernels beside it get the rest. Each exposed interval would
run beside the compute that precedes it on the device (what produced its input: the backward pass
of a gradient all-reduce), as much compute time as the interval lasts (less where less compute
precedes it in the window: overlap hides communication under compute that exists, so a program of
collectives alone has nothing to overlap). A compute kernel of ``C`` CTAs on a device of ``S`` SMs
(``TARGET_INFO_GPU.smCount``), beside a collective of ``k`` CTAs, keeps this share of its speed
(``progress_beside``; counting one CTA per SM, as the GEMMs that fill a device run):

* ``C <= S - k``: 1 (it fits in the SMs the collective leaves);
* ``S - k < C <= S``: 0 (one wave that the collective splits: its last CTAs wait for the
  collective's SMs and then run their whole length, so the kernel ends later by the time they
  waited and nothing is gained while it runs beside the collective);
* ``C > S``: ``ceil(C/S) / ceil(C/(S-k))`` (waves: the collective takes its share of the SMs);
* unknown grid (0): ``(S-k)/S``.

The saving of an exposed interval of length ``E`` is ``min(E, compute before it) * r``, ``r`` the
mean of those shares over the compute kernels it would run beside (weighted by their time there)
and the collectives in it (weighted by their time in it); per device the sum over its exposed
intervals. Without the device's SM count the shares are 1 (the saving is the exposed time).
Measured on two H200s (``workloads/ddp.py``, after-backward all-reduce against DDP, 24-CTA NCCL
kernels beside 120..132-CTA GEMMs): the overlap gained -0.04..0.12 ms per step of 0.7..1.1 ms
exposed; with NCCL held to 4 CTAs, 1.0..1.07 ms of 1.8 ms (``docs/findings.md``). What it does
not count: a collective runs longer beside compute (1.3-1.8x there), DDP's copies into its
buckets, and persistent kernels (grid = SM count) that lose less than the model's 0 (13-41% of the
time they ran beside the all-reduce): on those pairs the first two cost about what the third gives.

Impact: that saving, wall-clock over the devices and at most the device's with the largest (the
ranks of a job move together), claimed as the exposed wall-clock intervals so no other rule counts
them again. The message's per-device totals are those of the
collectives table (every type listed, the window rule of ``analyses/comm.py``: clipped to the
steady state), the wall-clock time when kernels ran at once on several streams; per iteration it
gives each rank's exposed time (its period, ``comm_per_iteration``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import category_mask
from nsysan.analyses.gpu import Intervals, Window
from nsysan.analyses.opclass import is_communication
from nsysan.analyses.program import Program
from nsysan.result import Analysis
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, rule
from nsysan.rules._window import has_gpu_activity
from nsysan.units import fmt_ns, fmt_pct


@rule("exposed-communication", "Communication not hidden under compute", min_frac=0.05, min_ns=100_000)
def check(ctx: RuleContext, *, min_frac: float, min_ns: int) -> Iterator[Finding]:
    a = ctx.a
    w = ctx.window
    merged = a.busy  # the merged busy intervals per device, by kind
    if not has_gpu_activity(ctx) or len(a.comm) == 0 or w.dur_ns <= 0 or merged is None:
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
        if wall <= 0 or dev not in merged.per_dev:
            continue
        d = merged.per_dev[dev]  # merged once by the analysis: clipping keeps them merged
        pids = np.unique(a.comm.loc[a.comm["device_id"] == dev, "pid"].to_numpy())
        cl, all_exposed, waited, waited_p2p = _exposed(a, d, w, pids, straggler)
        exposed = all_exposed - waited
        if exposed < min_ns or dev_busy <= 0 or exposed < min_frac * dev_busy:
            continue
        # overlap hides communication under compute that exists, and the collective takes SMs from it
        ov = overlap_saving(a, dev, cl, d, w)
        if ov.saving_ns < min_ns:
            continue
        worst_exposed = max(worst_exposed, ov.saving_ns)
        kinds_seen.update(a.collectives.loc[a.collectives["device_id"] == dev, "collective"].astype(str))
        cap_note = ov.note()
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
    it_note = (f" Iteration time p50: {fmt_ns(a.iterations.stats.p50_ns)}."
               if len(per_it) and a.iterations.range_name else "")
    multi = (f" On {len(parts)} devices: {fmt_ns(wall)} of wall-clock time exposed; overlap would save "
             f"{fmt_ns(worst_exposed)} on the device that saves most (what the job can save: its ranks move "
             "together)." if len(parts) > 1 else "")
    if a.ranks is None or len(a.ranks.ranks) < 2:
        multi += (" Only one rank is in this export: part of this may be waiting for other ranks to arrive; "
                  "analyze every rank's export together (nsysan analyze rank*.sqlite --out-dir DIR) to split "
                  "waiting from transfer.")
    yield finding(
        ctx, "exposed-communication",
        severity=Severity.WARNING if worst_exposed >= 0.1 * w.dur_ns else Severity.INFO,
        impact_ns=impact, claims=claims_of(*cl), suggestion=advice(ctx.program, kinds_seen),
        message=f"In the {w.label}: " + "; ".join(parts) + "." + multi + it_note,
        evidence=tuple(evidence))


def progress_beside(ctas: npt.ArrayLike, k: int, sms: int) -> np.ndarray:
    """The share of its own speed a compute kernel of ``ctas`` CTAs keeps while a collective holds
    ``k`` of the device's ``sms`` SMs (the module's docstring; one CTA per SM counted)."""
    c = np.asarray(ctas, dtype=np.float64)
    k = int(min(max(k, 0), sms - 1))
    free = sms - k
    with np.errstate(divide="ignore", invalid="ignore"):
        waves = np.where(c > sms, np.ceil(c / sms) / np.ceil(c / free), 1.0)
    r = np.where(c <= 0, free / sms, waves)
    return np.where((c > free) & (c <= sms), 0.0, r)


@dataclass(frozen=True)
class Overlap:
    """What overlapping a device's exposed communication would save (``overlap_saving``)."""

    saving_ns: int
    exposed_ns: int  # the exposed intervals' length
    beside_ns: int  # the compute time they would run beside (at most their length)
    share: float  # the mean share of its speed that compute keeps beside the collectives (r)
    split_frac: float  # of the compute beside, the share in one-wave kernels the collectives split
    ctas: int  # the collectives' CTAs (the most common, by time)
    sms: int  # the device's SMs (0: unknown)

    def note(self) -> str:
        """The message's words on the saving."""
        if self.sms <= 0:
            return (f"; only {fmt_ns(self.beside_ns)} of compute ran on the device to hide it under"
                    if self.beside_ns < self.exposed_ns else "")
        out = f"; overlapping it would save about {fmt_ns(self.saving_ns)}"
        if self.beside_ns < self.exposed_ns:
            out += f" (only {fmt_ns(self.beside_ns)} of compute precedes it to hide it under)"
        out += (f": the collectives hold {self.ctas} of the {self.sms} SMs, and the compute before them would keep "
                f"{fmt_pct(self.share)} of its speed beside them")
        if self.split_frac >= 0.05:
            out += (f" ({fmt_pct(self.split_frac)} of it in kernels of {self.sms - self.ctas + 1}..{self.sms} CTAs, "
                    "one wave the collective splits: their last CTAs wait for its SMs; fewer CTAs for the "
                    "collective, e.g. NCCL_MAX_CTAS, leave them room)")
        return out


class _Ramps:
    """Intervals [s, e), sorted once, and for a weight per interval and times ``lo``, ``hi``: the sum
    over the intervals of weight x their length inside each [lo, hi) (``between``)."""

    def __init__(self, s: np.ndarray, e: np.ndarray) -> None:
        self.o_s, self.o_e = np.argsort(s, kind="stable"), np.argsort(e, kind="stable")
        self.ss, self.ee = s[self.o_s], e[self.o_e]

    def between(self, wt: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        cw_s = np.concatenate([[0.0], np.cumsum(wt[self.o_s])])
        cws_s = np.concatenate([[0.0], np.cumsum(wt[self.o_s] * self.ss)])
        cw_e = np.concatenate([[0.0], np.cumsum(wt[self.o_e])])
        cwe_e = np.concatenate([[0.0], np.cumsum(wt[self.o_e] * self.ee)])

        def before(t: np.ndarray) -> np.ndarray:  # weight x length of each interval before t
            i, j = np.searchsorted(self.ss, t, side="left"), np.searchsorted(self.ee, t, side="left")
            return t * (cw_s[i] - cw_e[j]) - (cws_s[i] - cwe_e[j])

        return before(hi) - before(lo)


def _compute_beside(ms: np.ndarray, me: np.ndarray, xs: np.ndarray,
                    xe: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each exposed interval [xs, xe): the compute time it would run beside and the span [lo, hi)
    of that compute, on the merged compute intervals [ms, me). It is the compute before it, as much as
    the interval lasts; intervals with no compute between them (collectives one after the other)
    share the compute before them in turn: the last takes the compute nearest to the run, the first
    the farthest."""
    cum = np.concatenate([[0], np.cumsum(me - ms)])
    before = iv.covered_before(ms, me, xs)
    length = xe - xs
    later = np.zeros(len(xs), dtype=np.int64)  # exposed time after it before the next compute
    if len(xs) > 1:
        same = before[1:] == before[:-1]
        run = np.cumsum(np.concatenate([[True], ~same]))  # runs of intervals with no compute between
        tail = np.cumsum(length[::-1])[::-1]  # exposed time from each interval to the end
        last_of_run = np.concatenate([np.flatnonzero(run[1:] != run[:-1]), [len(xs) - 1]])
        end_of_run = tail[last_of_run] - length[last_of_run]  # exposed time after each run
        later = tail - length - end_of_run[run - 1]
    hi_c = np.maximum(before - later, 0)  # the compute it takes: cumulative compute in [lo_c, hi_c)
    beside = np.minimum(length, hi_c)

    def at(c: np.ndarray) -> np.ndarray:  # the time by which the device had computed c
        if not len(ms):
            return xs
        j = np.clip(np.searchsorted(cum, c, side="right") - 1, 0, len(ms) - 1)
        return np.minimum(ms[j] + (c - cum[j]), me[j])

    return beside, at(hi_c - beside), at(hi_c)


def overlap_saving(a: Analysis, dev: int, cl: Intervals, d: dict[str, Intervals], w: Window) -> Overlap:
    """What overlapping the exposed intervals ``cl`` of device ``dev`` with the compute before them
    would save, the SMs its collectives hold counted (the module's docstring). ``d``: the device's
    merged busy intervals by kind; ``w``: the window."""
    xs, xe = np.asarray(cl[0], dtype=np.int64), np.asarray(cl[1], dtype=np.int64)
    exposed = int((xe - xs).sum())
    beside, lo, hi = _compute_beside(*iv.clip_merged(*d["compute"], w.start_ns, w.end_ns), xs, xe)
    beside_ns = int(beside.sum())
    sms = _sm_count(a, dev)
    if sms <= 1 or beside_ns <= 0:
        return Overlap(beside_ns, exposed, beside_ns, 1.0, 0.0, 0, 0 if sms <= 1 else sms)
    share, split_i, ctas_k = _shares(a, dev, sms, int(w.start_ns), (xs, xe), (lo, hi))
    saving = round(float((beside * share).sum()))
    mean = float((beside * share).sum() / beside_ns)
    split_frac = float((beside * split_i).sum() / beside_ns)
    return Overlap(min(saving, beside_ns), exposed, beside_ns, mean, split_frac, ctas_k, sms)


def _shares(a: Analysis, dev: int, sms: int, t0: int, exposed: tuple[np.ndarray, np.ndarray],
            beside: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, int]:
    """Per exposed interval: the share of its speed the compute beside it (in [lo, hi): ``beside``)
    keeps next to the collectives in the interval (``progress_beside``, each collective weighted by
    its time there, each compute kernel by its time in [lo, hi)); the share of that compute in one-wave
    kernels the collectives split; and the collectives' CTAs (the most common, by time). The kernels
    are told apart by the one op classification (``analyses.opclass``)."""
    k = a.trace.kernels
    on = k.loc[(k["device_id"] == dev).to_numpy()]
    ctas = (on["grid_x"].to_numpy(np.int64) * on["grid_y"].to_numpy(np.int64) * on["grid_z"].to_numpy(np.int64))
    ks, ke = on["start_ns"].to_numpy(np.int64), on["end_ns"].to_numpy(np.int64)
    is_comm = category_mask(on["name"], is_communication)
    # times relative to the window: float sums stay exact enough
    xs_f, xe_f = (exposed[0] - t0).astype(np.float64), (exposed[1] - t0).astype(np.float64)
    lo_f, hi_f = (beside[0] - t0).astype(np.float64), (beside[1] - t0).astype(np.float64)
    compute = _Ramps((ks[~is_comm] - t0).astype(np.float64), (ke[~is_comm] - t0).astype(np.float64))
    cc = ctas[~is_comm]
    ran = compute.between(np.ones(len(cc)), lo_f, hi_f)  # compute kernel time
    kcomm = np.minimum(ctas[is_comm], sms - 1)
    ns_, ne_ = (ks[is_comm] - t0).astype(np.float64), (ke[is_comm] - t0).astype(np.float64)
    num, den, split = np.zeros(len(xs_f)), np.zeros(len(xs_f)), np.zeros(len(xs_f))
    time_by_k: dict[int, float] = {}
    for kv in np.unique(kcomm):
        m = kcomm == kv
        o = _Ramps(ns_[m], ne_[m]).between(np.ones(int(m.sum())), xs_f, xe_f)  # its time in each interval
        if not o.any():
            continue
        time_by_k[int(kv)] = float(o.sum())
        kept = compute.between(progress_beside(cc, int(kv), sms), lo_f, hi_f)
        sp = compute.between(((cc > sms - kv) & (cc <= sms)).astype(np.float64), lo_f, hi_f)
        with np.errstate(divide="ignore", invalid="ignore"):
            num += o * np.where(ran > 0, kept / ran, 1.0)
            split += o * np.where(ran > 0, sp / ran, 0.0)
        den += o
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(den > 0, num / den, 1.0)  # no collective kernel known in it: nothing held
        split_i = np.where(den > 0, split / den, 0.0)
    ctas_k = max(time_by_k, key=lambda kv: (time_by_k[kv], kv)) if time_by_k else 0
    return np.clip(share, 0.0, 1.0), split_i, ctas_k


def _sm_count(a: Analysis, dev: int) -> int:
    """The device's SM count (``TARGET_INFO_GPU.smCount``); 0 when the export does not give it."""
    gpus = a.trace.gpus
    if len(gpus) == 0 or "sm_count" not in gpus:
        return 0
    v = gpus.loc[(gpus["device_id"] == dev).to_numpy(), "sm_count"].dropna()
    return int(v.iloc[0]) if len(v) and int(v.iloc[0]) > 0 else 0


def _exposed(a: Analysis, d: dict[str, Intervals], w: Window, pids: np.ndarray,
             straggler: bool) -> tuple[Intervals, int, int, int]:
    """A device's communication with no compute beside it in the window ``w``, less the waiting
    that is not overlap's to hide: (those intervals, all exposed ns, waited ns, of which in
    point-to-point transfers). ``d``: the device's merged busy intervals by kind."""
    cl = iv.subtract(iv.clip_merged(*d["comm"], w.start_ns, w.end_ns),
                     iv.clip_merged(*d["compute"], w.start_ns, w.end_ns))
    all_exposed = iv.total(*cl)
    waited = waited_p2p = 0
    ranks = a.ranks
    if ranks is not None and len(ranks.aligned):
        for pid in pids:  # point-to-point waiting is the pipeline's dependency (its bubble), not overlap's
            cl = iv.subtract(cl, ranks.waiting(int(pid), p2p=True))
        waited_p2p = all_exposed - iv.total(*cl)
        lead = ranks.straggler
        for pid in pids:
            if straggler and lead is not None and int(pid) != int(lead["pid"]):  # waiting for it: rank-imbalance's
                cl = iv.subtract(cl, ranks.waiting(int(pid), p2p=False))
        waited = all_exposed - iv.total(*cl)
    return cl, all_exposed, waited, waited_p2p


def _device_part(a: Analysis, dev: int, coll: pd.DataFrame, wall: int, all_exposed: int, waits: tuple[int, int, int],
                 pids: np.ndarray, per_it: pd.DataFrame, cap_note: str) -> str:
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
    lead = a.ranks.straggler if a.ranks is not None else None  # waited > waited_p2p: there is one
    if waited:
        whom = [f"{fmt_ns(waited - waited_p2p)} for rank {lead['rank']} to arrive (rank-imbalance)"
                if waited > waited_p2p and lead is not None else "",
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


P2P = ("A pipeline's sends and receives are exposed when stages wait for each other: more micro-batches per "
       "step (the bubble shrinks as (stages-1)/(micro-batches+stages-1)), an interleaved 1F1B schedule, and "
       "``isend``/``irecv`` issued ahead of the compute that needs them.")
SHARDED = ("Prefetch the shards: FSDP with ``backward_prefetch=BackwardPrefetch.BACKWARD_PRE`` and "
           "``forward_prefetch=True`` (FSDP2: ``reshard_after_forward`` and explicit prefetching), and enough "
           "compute per unit (wrap larger modules) for an all-gather or reduce-scatter to hide under.")
ADVICE = Advice(
    jax=("Let XLA overlap the collectives: shard with ``jax.jit`` and ``NamedSharding`` so the compiler "
         "schedules them asynchronously (``--xla_gpu_enable_latency_hiding_scheduler=true`` in ``XLA_FLAGS``), "
         "and pipeline micro-batches so communication of one overlaps compute of the next."),
    torch_training=("Let DDP overlap the gradient all-reduce with the backward pass: buckets all-reduce as their "
                    "gradients are ready (tune ``bucket_cap_mb``; do not all-reduce gradients by hand after "
                    "``loss.backward()``; ``no_sync()`` only for the non-final micro-batches of gradient "
                    "accumulation); for all-reduces in the forward pass (tensor parallelism), overlap them with the "
                    "next layer's compute (async tensor parallelism, sequence parallelism)."),
    torch=("All-reduces inside the forward pass (tensor parallelism) sit on the critical path: overlap them with "
           "independent compute (async tensor parallelism, issuing the collective with ``async_op=True`` and "
           "waiting just before the result is used), or use fewer, larger collectives (fused all-reduce, fewer "
           "tensor-parallel ranks for a small model)."),
    default=("Overlap the collectives with independent compute: enqueue them on their own CUDA stream "
             "(``ncclAllReduce(..., comm, comm_stream)``, several in one ``ncclGroupStart``/``ncclGroupEnd``), "
             "make the compute stream wait on a ``cudaEventRecord`` of the communication stream only where the "
             "result is used, and split the work so the next chunk computes while this one communicates."),
    first=("jax",))  # XLA schedules the collectives even where PyTorch ran too


def advice(p: Program, kinds: set[str]) -> str:
    """How to hide these collectives, for this program and these collectives: a PyTorch program's
    point-to-point or sharded collectives (by ``kinds``) before its DDP or tensor-parallel words."""
    if p.torch and not p.jax:
        if bool(kinds) and kinds <= {"SendRecv", "Send", "Recv"}:
            return P2P
        if kinds & {"AllGather", "ReduceScatter"}:
            return SHARDED
    return choose(ADVICE, p)
