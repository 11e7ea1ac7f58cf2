"""The GPU waits while the submitting CPU thread does other work.

**Why it matters**: between submissions the GPU idles while the thread that feeds it runs Python,
prints results, does I/O or pre-processing. Every such gap adds directly to iteration latency.
nsys' gap rule only looks at gaps over 500 ms; here the threshold is relative to the iteration.

**Fix**: move that work off the submitting thread (a worker thread or process for result
handling, printing, I/O), or queue the next batch before doing it; for many small launches, see
launch-bound.

What the submitting thread was doing is measured by overlap (``analyses/gaps.py``): each activity
is credited with the time it ran inside the gaps (up to the launching call's start), each
nanosecond once, the most specific traced thing first (a CUDA API call, else an OS runtime call,
else the innermost NVTX range); the rest is untraced CPU work, and the time from the launching
call's start to the gap's end is listed apart, so the listed times add up to the gaps' total (the
thread's time in them: where several devices idle at once, the thread is credited once). Each
gap's class (its ``activity``) is the activity covering over half of it, else "mostly untraced CPU
work" when untraced time does, else its largest activity; the evidence gives each gap's shares
(adding up to at most 100%, the rest untraced). With Python sampling (``-s process-tree
--python-sampling=true``, exported ``--include-blobs=true``), the Python functions the samples
taken in the gaps were running, with their share (``analyses/samples.py``), and without it, the
flags that would add them. With thread scheduling recorded (``SCHED_EVENTS``, ``--cpuctxsw``;
``analyses/sched.py``), the share of those gaps the submitting thread was on a CPU (running: CPU work)
or off it (blocked: waiting on input, another process or a lock), and the OS call it sat in or "not
in a traced call"; when it was blocked over half the time the fix is to feed it sooner (input
workers, a faster producer), not to move CPU work. With unified memory CPU page faults recorded
(``--cuda-um-cpu-page-faults=true``) inside at least half of the waits, the cause is the CPU pulling
managed memory back (the faults, the bytes migrated to the host, the range the thread was in) and
the fix is the unified-memory one (prefetch to the CPU, or keep the data on one side). Its saving is
the faults' service, not the CPU's own work, which the fix keeps (the writes still run): a CPU fault
has no duration in the trace, so the cost of one is measured on the NVTX range the faults fell in
most, over its instances in the capture: the faulting instances' time beyond the fault-free ones'
median (the range's own work: typically a first instance, before the GPU touched the memory),
summed, over their faults (``unified.cpu_fault_cost``); each wait saves its faults times that, at most
its own time. On um_cpu_writes that is 131 us a fault, 11.4 ms of the 26.9 ms step under nsys (43%),
against the measured re-runs without the profiler: a pinned host buffer and one copy saved 59% of the
step (with the GPU side, unified-memory-faults' 6.4 ms, 66% predicted), prefetching 28%. Without a
fault-free instance the two cannot be told apart: the whole wait stays counted and the message says it
is an upper bound. The per-gap threshold applies to a wait: the gaps of one device that end at the
same launching call (migrations started by the CPU's faults split one wait into many short gaps).
Gaps that happen once rather than per iteration (an activity seen in
fewer than half the steady iterations (at least 3), one that names setup work (compile, JIT, module load, init,
autotune, warm-up, build), or a gap over 20x its activity's median: a JIT compile, reading input,
building a model) are one-time costs: they are listed apart and not counted. Fires when the
recurring host-caused idle time of one device exceeds ``min_frac`` of the steady window; every
percentage is per device. Impact: the wall-clock time of those gaps up to their launching calls'
starts (their union over devices; the rest of each gap, from the call's start to the GPU's, is the
call's own latency: a pageable copy the driver stages, a queued launch, which moving work off the
thread does not remove),
allocated against the other findings (see ``nsysan.rules``). When only one-time gaps pass the
threshold, the finding is informational with impact 0. In a run with no loop (no iteration: a
one-shot program) one-time costs are all there is: every gap is counted as a recurring one is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from nsysan.analyses.gap_activity import activity_time
from nsysan.analyses.program import Program
from nsysan.rules._advice import Advice, choose
from nsysan.rules._base import Finding, RuleContext, Severity, claims_of, finding, records, rule
from nsysan.rules._window import has_gpu_activity, one_time_mask, recurrence_keys, window_gap_rows
from nsysan.rules._wording import by_device, label
from nsysan.units import fmt_bytes, fmt_ns

if TYPE_CHECKING:  # imported where used (the scheduling analysis is read only when the trace has it)
    from nsysan.analyses.sched import Schedule

FEED = Advice(
    torch=("more input workers producing ahead of the loop (PyTorch ``DataLoader(num_workers=..., prefetch_factor=..., "
           "pin_memory=True, persistent_workers=True)``)"),
    default="more producer threads or processes working ahead of the loop")


def blocked_advice(p: Program) -> str:
    """The fix when the submitting thread was blocked, not busy: feed it sooner, in the program's terms."""
    return ("The submitting thread was mostly blocked in these gaps, not busy: it waited for its input, on output, "
            f"another process or a lock. Feed it sooner: {choose(FEED, p)}, a faster producer, or a deeper queue "
            "filled before it is needed; move blocking output (printing, logging, file writes) to a worker thread; "
            "when it waits on a lock, shorten what holds it.")


INPUT_MIN = 0.5  # share of the gaps' Python samples inside the input pipeline that names it


def _input_share(ctx: RuleContext, gaps: pd.DataFrame) -> float:
    """The share of the Python samples in ``gaps`` taken inside the input pipeline (``samples.INPUT_FUNCTIONS``)."""
    samples = ctx.a.idle_samples
    if samples is None or not samples.source:
        return 0.0
    return samples.for_gaps(gaps).input_share()


INPUT_ADVICE = Advice(
    torch=("Load, decode and collate the batches in DataLoader worker processes: ``DataLoader(dataset, "
           "batch_size=..., num_workers=N, persistent_workers=True, pin_memory=True, prefetch_factor=2)`` with "
           "N about the CPU cores per GPU (start at 4-8); with Lightning, return that DataLoader from "
           "``train_dataloader()``; with the Hugging Face Trainer, ``TrainingArguments(dataloader_num_workers=N, "
           "dataloader_pin_memory=True, dataloader_persistent_workers=True)``. Keep per-item work vectorised "
           "(decode on the GPU, e.g. torchvision.io / DALI, when the CPU is the limit)."),
    jax=("Prepare batches ahead of the step in background threads or processes (``tf.data`` with "
         "``prefetch``, ``grain`` with worker processes, or a thread that fills a queue) and "
         "``jax.device_put`` the next batch before it is needed."),
    default=("Prepare the next batches in worker threads or processes that fill a queue ahead of the loop, in "
             "pinned host memory, so the thread that submits GPU work only takes ready batches."))


def input_advice(p: Program) -> str:
    """The framework's fix for an input pipeline on the training thread."""
    return choose(INPUT_ADVICE, p)


ONE_TIME_FIX = ("this is a one-time cost, not a per-iteration one: keep it out of timed and latency-critical "
                "regions (do it before the loop, warm up first, cache compiled kernels or engines), or run it "
                "in the background.")


@rule("host-bound-gap", "GPU idle while the CPU does other work", min_frac=0.05, min_gap_frac_of_iteration=0.02)
def check(ctx: RuleContext, *, min_frac: float, min_gap_frac_of_iteration: float) -> Iterator[Finding]:
    if not has_gpu_activity(ctx):
        return
    # the host and sync gaps of the window as positions first: only the recurring and the one-time
    # ones are copied (as frames), not every gap of the window on the way
    full = ctx.a.gaps
    w = ctx.window
    if len(full) == 0:
        return
    rows = window_gap_rows(ctx, ("host", "sync"))
    if len(rows) == 0 or w.dur_ns == 0:
        return
    p50 = int(ctx.a.iterations.stats.p50_ns or 0)
    min_gap = int(p50 * min_gap_frac_of_iteration) if p50 else 0
    rows = rows[_wait_ns(full, rows) >= min_gap]
    one = one_time_mask(ctx, recurrence_keys(ctx, full["activity"].iloc[rows]), full["gap_ns"].to_numpy()[rows],
                        full["start_ns"].to_numpy()[rows])
    one_shot = not len(ctx.a.iterations.table)
    if one_shot:  # a run with no loop: its one-time costs are all there is, so every gap counts
        one[:] = False
    rec_rows = rows[~one]
    rec = full if len(rec_rows) == len(full) else full.iloc[rec_rows]
    once = full.iloc[rows[one]]
    del rows
    dev_max = lambda d: int(d.groupby("device_id")["gap_ns"].sum().max()) if len(d) else 0
    once_note = ""
    if len(once):
        top = once.nlargest(3, "gap_ns")
        once_note = (f" Not counted: {len(once)} one-time gap(s), {fmt_ns(int(once['gap_ns'].sum()))} in total ("
                     + ", ".join(f"{label(r['activity'])} {fmt_ns(int(r['gap_ns']))}" for r in records(top))
                     + "): a one-time cost, not a per-iteration one.")
    if dev_max(rec) >= min_frac * w.dur_ns and len(rec):
        total = int(rec["gap_ns"].sum())
        # the saving: each gap up to its launching call's start (what the thread did instead of
        # submitting). From the call's start to the GPU's start is the call's own latency (a
        # pageable copy staged by the driver, a launch queued): moving host work off the thread
        # cannot remove it (SamuelAmsih's export: 5.2 s of 24.7 s after cudaMemcpyAsync calls)
        g_st, g_en = rec["start_ns"].to_numpy(), rec["end_ns"].to_numpy()
        cut = np.clip(rec["api_start_ns"].to_numpy(), g_st, g_en)
        saving = int((cut - g_st).sum())
        tail_note = (f" Counted: {fmt_ns(saving)}, the gaps up to their launching calls' starts; the "
                     f"{fmt_ns(total - saving)} from the calls' starts to the GPU's is the calls' own latency "
                     "(a pageable copy staged by the driver, a queued launch), which moving work off the thread "
                     "does not remove." if total - saving > 0.01 * total else "")
        # the gap classes (by label), for the samples per class
        by_class = rec.groupby(rec["activity"].astype(str))["gap_ns"].agg(["count", "sum"]).sort_values(
            "sum", ascending=False)
        spent = activity_time(full, ctx.a.gap_activity, rec_rows)  # each thread nanosecond once (several devices)
        parts = _doing(spent, int(spent["ns"].sum()))
        state, blocked = _running_or_blocked(ctx, rec, g_st, cut)
        share = _input_share(ctx, rec)
        extra: dict[str, str] = ({"suggestion": blocked_advice(ctx.program)} if blocked else
                                 {"suggestion": ONE_TIME_FIX, "title": "One-time CPU work left the GPU idle"} if one_shot
                                 else {})
        if share >= INPUT_MIN:
            extra = {"suggestion": input_advice(ctx.program), "title": "Input pipeline on the training thread"}
            state += (f" The input pipeline ran on the submitting thread in these gaps: {share:.0%} of the Python "
                      "samples taken in them are inside a Dataset's item access, collation or the DataLoader's fetch.")
        um_note, um_saving = _cpu_faults(ctx, rec, g_st, cut)
        if um_note:
            extra = {"suggestion": UM_CPU_FIX, "title": "GPU idle while the CPU pulls managed memory back"}
            state += um_note
            if um_saving is not None:  # the faults' service, not the CPU's own work (see _fault_saving)
                saving, tail_note = um_saving, ""
        yield finding(ctx, "host-bound-gap",
                      severity=Severity.CRITICAL if dev_max(rec) > 0.2 * w.dur_ns else Severity.WARNING,
                      impact_ns=saving, claims=claims_of(g_st, cut), **extra,
                      message=("This run has no loop (no iteration found): its one-time costs are its cost. " if one_shot
                               else "") + f"The GPU sat idle waiting for the CPU to submit work, per device: {by_device(rec, w)}. "
                              f"What the submitting thread was doing: {parts}.{state}{tail_note}"
                              f"{_python_note(ctx, rec, by_class)}{once_note}",
                      evidence=_evidence(rec))
    elif dev_max(once) >= min_frac * w.dur_ns:
        yield finding(ctx, "host-bound-gap", severity=Severity.INFO, impact_ns=0,
                      title="One-time CPU work left the GPU idle",
                      suggestion=ONE_TIME_FIX,
                      message=f"The GPU sat idle during one-time CPU work, per device: {by_device(once, w)}. "
                              f"No recurring gap passes the threshold.{once_note}",
                      evidence=_evidence(once))


def _wait_ns(full: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Per gap ``rows``: the time of the whole wait it is part of, the gaps of one device that end
    at the same launching call (unified memory migrations the CPU's page faults start split one wait
    for one launch into many short gaps: each is short, the wait is not)."""
    ns = full["gap_ns"].to_numpy()[rows]
    if len(rows) < 2:
        return ns
    dev = np.asarray(full["device_id"].to_numpy()[rows], dtype=np.int64)
    call = np.asarray(full["api_start_ns"].to_numpy()[rows], dtype=np.int64)
    same_dev = dev[1:] == dev[:-1]
    if bool((dev[1:] >= dev[:-1]).all()) and bool(((call[1:] >= call[:-1]) | ~same_dev).all()):
        # in (device, call) order already (one device's gaps, each launch after the one before): the
        # groups are runs as they stand, no sort and no positions
        new = np.ones(len(rows), dtype=bool)
        new[1:] = ~same_dev | (call[1:] != call[:-1])
        del same_dev, dev, call
        starts = np.flatnonzero(new)
        del new
        return np.repeat(np.add.reduceat(np.asarray(ns, dtype=np.int64), starts), np.diff(starts, append=len(rows)))
    del same_dev
    order = np.lexsort((call, dev))  # groups of (device, call) as runs: no 2-D unique (a sort of rows)
    dev, call = dev[order], call[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (dev[1:] != dev[:-1]) | (call[1:] != call[:-1])
    del dev, call
    starts = np.flatnonzero(new)
    group = np.empty(len(order), dtype=np.int64)
    group[order] = np.cumsum(new) - 1
    return np.add.reduceat(np.asarray(ns, dtype=np.int64)[order], starts)[group]


UM_CPU_FIX = ("the CPU touches managed memory that the GPU used last, and each page it touches faults and "
              "migrates back from the device while the GPU waits. Prefetch it to the CPU in bulk before the CPU "
              "touches it (``cudaMemPrefetchAsync(ptr, bytes, cudaCpuDeviceId, stream)``, CUDA 13: a "
              "``cudaMemLocation`` of type ``cudaMemLocationTypeHost``; CuPy ``cupy.cuda.runtime.memPrefetchAsync``), "
              "and to the device before the kernels; better, keep the data on one side: the CPU writes a pinned host "
              "buffer and one asynchronous copy moves it to a device buffer (``cudaMemcpyAsync``; PyTorch "
              "``dev.copy_(pinned, non_blocking=True)``), or the update runs on the GPU.")
UM_CPU_SHARE = 0.5  # share of the recurring waits with a CPU page fault inside that names the cause


def _cpu_faults(ctx: RuleContext, rec: pd.DataFrame, starts: np.ndarray, cut: np.ndarray) -> tuple[str, int | None]:
    """The CPU page faults on managed memory (``--cuda-um-cpu-page-faults=true``) of the submitting
    processes inside the gaps (up to the launching calls), when they fall in at least ``UM_CPU_SHARE``
    of the waits: the sentence that names them as the cause and the saving of the fix
    (``_fault_saving``), else ("", None)."""
    faults = ctx.trace.um_cpu_faults
    if len(faults) == 0 or len(rec) == 0:
        return "", None
    pid = rec["pid"].to_numpy()
    t = np.sort(faults["start_ns"].to_numpy(np.int64)[np.isin(faults["pid"].to_numpy(), pid)])
    n = np.searchsorted(t, cut, side="left") - np.searchsorted(t, starts, side="left")
    key = np.stack([rec["device_id"].to_numpy(), rec["api_start_ns"].to_numpy()])
    _, inv = np.unique(key, axis=1, return_inverse=True)
    inv = inv.reshape(-1)
    per_wait = np.bincount(inv, weights=n)
    if len(per_wait) == 0 or (per_wait > 0).mean() < UM_CPU_SHARE:
        return "", None
    # each wait from its first gap's start to its launching call: the migrations split it into gaps
    lo = np.full(len(per_wait), np.iinfo(np.int64).max)
    np.minimum.at(lo, inv, starts.astype(np.int64))
    hi = np.zeros(len(per_wait), np.int64)
    np.maximum.at(hi, inv, cut.astype(np.int64))
    mc = ctx.trace.memcpy
    back = 0
    if len(mc):
        from nsysan.analyses.unified import UM_DTOH

        m = mc["copy_kind"].to_numpy() == UM_DTOH
        ms = mc["start_ns"].to_numpy(np.int64)[m]
        order = np.argsort(ms, kind="stable")
        cum = np.concatenate([[0], np.cumsum(mc["bytes"].to_numpy(np.int64)[m][order])])
        ms = ms[order]
        back = int((cum[np.searchsorted(ms, hi, side="left")] - cum[np.searchsorted(ms, lo, side="left")]).sum())
    # the activity the faults fell in most (by faults, each gap's class)
    acts = pd.Series(n).groupby(rec["activity"].astype(str).to_numpy(), sort=True).sum().sort_values(
        ascending=False, kind="stable")
    act = str(acts.index[0]) if len(acts) and acts.iloc[0] > 0 else ""
    where = f", the thread mostly in {label(act)}" if act else ""
    model, saving = _fault_saving(ctx, rec, act, per_wait, np.bincount(inv, weights=cut - starts))
    return (f" The CPU page-faulted on managed memory in these gaps{where}: {int(n.sum()):,} CPU page faults in "
            f"{int((per_wait > 0).sum())} of {len(per_wait)} waits (about {n.sum() / len(per_wait):,.0f} a wait), "
            f"pulling {fmt_bytes(back)} back from the device (unified memory migrations to the host, "
            f"{fmt_bytes(back // len(per_wait))} a wait): the CPU work that kept the GPU waiting touched memory the "
            "GPU used last, and each page it touched migrated back on a fault (unified-memory-faults gives the GPU "
            f"side).{model}"), saving


def _fault_saving(ctx: RuleContext, rec: pd.DataFrame, act: str, faults: np.ndarray,
                  wait_ns: np.ndarray) -> tuple[str, int | None]:
    """What the unified-memory fix saves in the waits: the faults' service, not the CPU's own work
    (the fix keeps the writes). Per wait, its CPU faults times the cost of a fault
    (``unified.cpu_fault_cost``: the NVTX range the faults fell in, its instances with and without
    faults), at most the wait's counted time. (sentence, saving), or (sentence, None) when the range
    has no fault-free instance to measure its own work by: the whole wait stays counted, an upper bound."""
    from nsysan.analyses.unified import cpu_fault_cost

    threads = set(zip(rec["pid"].to_numpy().tolist(), rec["tid"].to_numpy().tolist()))
    cost = cpu_fault_cost(ctx.trace, act[5:], threads) if act.startswith("nvtx:") else None
    if cost is None:
        return (f" No instance of {label(act) if act else 'the range the faults fell in'} ran without CPU faults, "
                "so its own work and the faults' service cannot be told apart: the saving counted is the whole wait, "
                "an upper bound (the fix keeps the CPU's own work)."), None
    saving = int(np.minimum(wait_ns, faults * cost.per_fault_ns).sum())
    return (f" Saving model: the fix removes the faults' service, not the CPU's own work: {label(act)} took "
            f"{fmt_ns(cost.clean_ns)} in {cost.clean} instance(s) without a CPU fault (its own work) and "
            f"{fmt_ns(cost.faulting_ns)} (median) in {cost.faulting} with {cost.faults:,} faults, "
            f"{fmt_ns(cost.per_fault_ns)} a fault beyond the fault-free time; for the {int(faults.sum()):,} faults "
            f"in these waits that is {fmt_ns(saving)} of their {fmt_ns(int(wait_ns.sum()))}, the saving counted."
            ), saving


def _running_or_blocked(ctx: RuleContext, rec: pd.DataFrame, starts: np.ndarray, cut: np.ndarray) -> tuple[str, bool]:
    """From the context switches (``analyses/sched.py``): the share of the gaps (up to the launching
    calls) the submitting threads were on a CPU, and where they sat when off it. ("", False) when the
    trace has no scheduling events."""
    from nsysan.analyses.sched import NOT_IN_A_CALL, ZERO, add

    states = ctx.a.thread_states
    if states is None or not states.recorded or len(rec) == 0:
        return "", False
    tt = ZERO
    pid, tid = rec["pid"].to_numpy(), rec["tid"].to_numpy()
    for p, t in sorted(set(zip(pid.tolist(), tid.tolist()))):
        m = (pid == p) & (tid == t)
        tt = add(tt, states.schedule.thread_time(int(p), int(t), starts[m], cut[m]))
    if tt.total_ns == 0:
        return "", False
    where = [f"{n} {fmt_ns(v)}" for n, v in tt.top_calls(3)]
    if tt.off_untraced_ns:
        where.append(f"{NOT_IN_A_CALL} {fmt_ns(tt.off_untraced_ns)}")
    if tt.off_share >= 0.5:
        um = _managed_to_host(ctx, starts, cut)
        if um:  # CPU page faults on managed memory block the thread while the pages move back
            return (f" By the context switches the thread was blocked (off the CPU) {tt.off_share:.0%} of these gaps "
                    f"({', '.join(where)}), and managed memory migrated to the host in {um} of them: CPU page faults "
                    "on unified memory block the thread while the pages move (see unified-memory-faults; "
                    "prefetch to the host before the CPU touches it)."), False
        return (f" By the context switches the thread was blocked (off the CPU) {tt.off_share:.0%} of these gaps "
                f"({', '.join(where)}): waiting (for its input, on output, another process or a lock), not computing."
                + _waker_note(ctx, states.schedule, rec, starts, cut)), True
    off = f"; off the CPU {tt.off_share:.0%} ({', '.join(where)})" if tt.off_ns else ""
    return (f" By the context switches the thread was running (on a CPU) {tt.running_share:.0%} of these gaps{off}: "
            "CPU work."), False


def _waker_note(ctx: RuleContext, schedule: Schedule, rec: pd.DataFrame, starts: np.ndarray, cut: np.ndarray) -> str:
    """Who the thread with the most gap time waited for, and what that thread did (``analyses/wakers.py``)."""
    from nsysan.analyses.wakers import note, waker_of

    key = (rec["pid"].to_numpy(np.int64) << 32) | rec["tid"].to_numpy(np.int64)
    u, inv = np.unique(key, return_inverse=True)
    top = int(u[np.bincount(inv, weights=cut - starts).argmax()])
    m = key == top
    w = waker_of(ctx.trace, schedule, top >> 32, top & 0xFFFFFFFF, starts[m], cut[m])
    return note(w) if w is not None else ""


def _managed_to_host(ctx: RuleContext, starts: np.ndarray, ends: np.ndarray) -> int:
    """How many of the intervals hold the start of a unified memory migration to the host (copy kind
    12: the CPU touched managed memory that lived on the GPU)."""
    mc = ctx.trace.memcpy
    if len(mc) == 0:
        return 0
    from nsysan.analyses.unified import UM_DTOH

    t = np.sort(mc["start_ns"].to_numpy(np.int64)[mc["copy_kind"].to_numpy() == UM_DTOH])
    if len(t) == 0:
        return 0
    n = np.searchsorted(t, ends, side="left") - np.searchsorted(t, starts, side="left")
    return int((n > 0).sum())


def _doing(spent: pd.DataFrame, total: int, top: int = 5) -> str:
    """The activities that took the gaps' time, by overlap (``activity_time``): the ``top`` largest
    traced ones, the other traced ones together, then the untraced rest and the launching calls'
    tails; the times add up to ``total``."""
    from nsysan.analyses.gap_activity import LAUNCH_TIME, UNTRACED_TIME
    from nsysan.units import fmt_pct

    rest = spent["activity"].isin([UNTRACED_TIME, LAUNCH_TIME]).to_numpy()
    traced, tail = spent.loc[~rest], spent.loc[rest]
    item = lambda a, ns, n: f"{a}: {fmt_ns(ns)} ({fmt_pct(ns / total) if total else '0%'}, in {n} gaps)"
    out = [item(label(a), int(v), int(n)) for a, n, v in traced.head(top).itertuples(index=False)]
    if len(traced) > top:
        out.append(f"{len(traced) - top} other traced activities: {fmt_ns(int(traced['ns'].iloc[top:].sum()))}")
    out += [item(str(a), int(v), int(n)) for a, n, v in tail.itertuples(index=False)]
    return "; ".join(out)


def _python_note(ctx: RuleContext, gaps: pd.DataFrame | None = None, by_class: pd.DataFrame | None = None) -> str:
    """Which functions ran on the submitting thread in these gaps, over all of them and per gap class
    (``analyses/samples.py``: Python samples first, else native CPU samples), or which input would tell."""
    s = ctx.a.idle_samples
    if s is None:
        return ""
    whole = s.for_gaps(gaps) if gaps is not None and s.source else None
    top = whole.top() if whole is not None else s.top()
    if not top:
        if whole is not None and whole.samples:
            return f" Only {whole.samples} sample(s) fell in these gaps: too few to say which code ran."
        return f" Which code ran: {s.note}." if s.note else ""
    what = "Python samples" if s.source == "python" else "CPU samples"
    out = f" {what} taken in these gaps: {top}."
    if gaps is not None and by_class is not None and len(by_class) > 1:
        per = []
        for act in list(by_class.index)[:5]:
            in_class = s.for_gaps(gaps.loc[gaps["activity"].astype(str).to_numpy() == act], act)
            per.append(f"{label(act)}: {in_class.top(2)}" if in_class.attributed else
                       f"{label(act)}: {in_class.samples} sample(s), too few to attribute")
        out += " Per gap class: " + "; ".join(per) + "."
    if s.source == "native" and s.note:
        out += f" {s.note}."
    return out


def _evidence(gaps: pd.DataFrame) -> tuple[dict[str, Any], ...]:
    ev = []
    for r in records(gaps.nlargest(10, "gap_ns")):  # the row's cells as iterrows gives them (mixed: as objects)
        raw = r["breakdown"]  # (None: a gap outside the longest explained in detail)
        bd = raw or []
        # each gap's shares (exclusive) add up to at most 1: the rest of it is untraced
        untraced = round(max(0.0, 1.0 - sum(float(x["share"]) for x in bd)), 4) if raw is not None else None
        ev.append({"start_ns": int(r["start_ns"]), "gap_ns": int(r["gap_ns"]), "device_id": int(r["device_id"]),
                   "tid": int(r["tid"]), "activity": label(r["activity"]), "next_api": r["api_name"],
                   "next_op": str(r["next_op"])[:120],
                   "untraced_frac": untraced,
                   "breakdown": [dict(x) for x in bd[:5]]})
    return tuple(ev)
