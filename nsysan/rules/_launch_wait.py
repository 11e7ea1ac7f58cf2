"""The GPU's wait for kernel launches, iteration by iteration: launch-bound's per-iteration
estimate (its module docstring says what it counts). Each steady iteration's thread's launch calls
in runs (broken between iterations, at a change of device, and at a long stretch of other host
work); the GPU's idle time inside each run's CPU span is the wait a graph replay or fused kernels
remove; the sequence (thread or rank) that would save most is the one reported, with the innermost
NVTX range holding most of its launches."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import rows_of
from nsysan.analyses.gpu import Busy, Window
from nsysan.rules._base import RuleContext, claims_of
from nsysan.rules._window import ONE_TIME_OUTLIER, steady_iterations
from nsysan.units import fmt_ns, fmt_pct


@dataclass(frozen=True)
class PerIteration:
    """The GPU's wait for the launches of the steady iterations (``per_iteration``)."""

    estimate: int  # ns: the saving of the sequence (thread) that saves most: the sum over its iterations,
    # at most their count x its median iteration's (sequences run at once: their savings are not added)
    per_seq: int  # steady iterations with launches of that sequence
    claims: tuple[np.ndarray, np.ndarray]  # the GPU idle intervals inside the launch spans
    iterations: int  # steady iterations with launches
    kernels: float  # median launches per iteration
    span_ns: int  # median CPU launch span per iteration (first launch call's start to the last one's end)
    gpu_ns: int  # median GPU time of an iteration's kernels (sum of their durations)
    idle_ns: int  # median GPU idle time inside an iteration's launch spans
    total_ns: int  # idle inside the launch spans, all iterations
    range_name: str  # the iteration range
    where: str  # the innermost NVTX range holding most of the launches ('' when none)
    where_share: float  # of the launches
    sequences: int = 1  # threads or ranks whose iterations launched: the figures are the best one's

    def sentence(self, ctx: RuleContext) -> str:
        w = ctx.window
        at = (f" inside NVTX range '{self.where}' ({fmt_pct(self.where_share)} of them)" if self.where else "")
        per = self.estimate / max(self.per_seq, 1)
        seq = (f" (of the {self.sequences} threads or ranks that launch, the one that would save most)"
               if self.sequences > 1 else "")
        return (f"Each '{self.range_name}' iteration{seq} launches {self.kernels:g} kernels (median){at}, "
                f"one by one, over {fmt_ns(self.span_ns)} of CPU time on its thread (first launch to last) for "
                f"{fmt_ns(self.gpu_ns)} of GPU work: the GPU waited for the launches {fmt_ns(self.idle_ns)} "
                "per iteration (median; "
                f"{fmt_ns(self.total_ns)} over {self.iterations} steady iterations, "
                f"{fmt_pct(self.total_ns / w.dur_ns)} of the {w.label}). Replayed as a CUDA Graph or fused, the "
                f"iteration would wait for the GPU instead: about {fmt_ns(int(per))} less per iteration.")


def per_iteration(ctx: RuleContext, launches: pd.DataFrame, plain: np.ndarray,
                  max_gap_ns: int = 200_000) -> PerIteration | None:
    """Per steady iteration, the GPU idle time inside the CPU spans of its launches (see the module
    docstring); None without an iteration model or without launches inside its iterations.
    ``plain``: positions in ``launches`` of the window's kernel launches (no graph launches);
    ``max_gap_ns``: host time between two launches above which they are not one run."""
    its = steady_iterations(ctx)
    busy = ctx.a.busy
    if len(its) == 0 or len(plain) == 0 or busy is None:
        return None
    w = ctx.window
    # the launch columns as they are (no copy of each for the window's launches: 1.2M launches, six
    # columns); each thread's launches are taken from them by position
    pid_c, tid_c = launches["pid"].to_numpy(), launches["tid"].to_numpy()
    cols = (launches["api_start_ns"].to_numpy(), launches["api_end_ns"].to_numpy(), launches["gpu_ns"].to_numpy(),
            launches["device_id"].to_numpy())
    ipid, itid = its["pid"].to_numpy(), its["tid"].to_numpy()
    ist, ien = its["start_ns"].to_numpy(), its["end_ns"].to_numpy()
    per_idle, per_n, per_span, per_gpu = [], [], [], []
    claim_s: dict[int, list[np.ndarray]] = {}
    claim_e: dict[int, list[np.ndarray]] = {}
    name_a: list[np.ndarray] = []  # the counted launches' call starts, per thread (for the range names)
    threads: list[tuple[int, int]] = []
    for p_, t_ in sorted(set(zip(ipid.tolist(), itid.tolist()))):
        got = _thread_launches(cols, plain, pid_c, tid_c, p_, t_)
        if got is None:
            continue
        a, e, g, d = got
        del got
        sel = np.flatnonzero((ipid == p_) & (itid == t_))
        s_it, e_it = ist[sel], ien[sel]
        io = np.argsort(s_it, kind="stable")
        s_it, e_it = s_it[io], e_it[io]
        k, rows = _in_iterations(a, s_it, e_it)  # the iteration each launch call starts in
        if len(k) == 0:
            continue
        if rows is not None:
            cols_t = [a, e, g, d]
            del a, e, g, d
            a, e, g, d = _kept(rows, cols_t)
        n_it = len(s_it)
        counts, gpu = np.bincount(k, minlength=n_it), np.bincount(k, weights=g, minlength=n_it)
        del g  # (each column let go as soon as it is summed: a million launches a thread on big traces)
        span = _launch_spans(a, e, k, n_it)
        rs, re_, rd, rk = _runs(a, e, d, k, w, max_gap_ns)
        del e, d, k
        idle = _idle_in_runs(busy, rs, re_, rd, claim_s, claim_e)
        per_idle.append(np.bincount(rk, weights=idle, minlength=n_it))
        per_n.append(counts)
        per_gpu.append(gpu)
        per_span.append(span)
        name_a.append(a)
        threads.append((p_, t_))
        del a, rs, re_, rd, rk, idle, counts, gpu, span  # (a thread's launch columns let go before the next's)
    if not per_n:
        return None
    estimate, per_seq, best = _best_sequence(per_idle, per_n)
    # the numbers the message gives are that sequence's (threads or ranks run at once: one sequence's
    # per-iteration figures and its saving, not a median over all of them beside one rank's saving)
    n = per_n[best]
    has = n > 0
    idle_i = per_idle[best][has]
    span_i, gpu_i = per_span[best][has], per_gpu[best][has]
    total = int(idle_i.sum())
    cs = np.concatenate([np.concatenate(v) for v in claim_s.values()]) if claim_s else np.zeros(0, np.int64)
    ce = np.concatenate([np.concatenate(v) for v in claim_e.values()]) if claim_e else np.zeros(0, np.int64)
    where, share = _where(ctx, threads, name_a)
    return PerIteration(estimate=estimate, per_seq=per_seq, claims=claims_of(cs, ce), iterations=int(has.sum()),
                        kernels=float(np.median(n[has])), span_ns=int(np.median(span_i)),
                        gpu_ns=int(np.median(gpu_i)), idle_ns=int(np.median(idle_i)), total_ns=total,
                        range_name=str(ctx.a.iterations.range_name or "iteration"), where=where, where_share=share,
                        sequences=len(per_n))


def _thread_launches(cols: tuple[np.ndarray, ...], plain: np.ndarray, pid_c: np.ndarray, tid_c: np.ndarray, p_: int,
                     t_: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Thread (p_, t_)'s launches among ``plain``, in call order: (call start, call end, GPU time,
    device) from the launch columns ``cols`` (the same four); None when it has none."""
    a_all, e_all, g_all, d_all = cols
    hit = pid_c[plain] == p_
    hit &= tid_c[plain] == t_
    mine = plain if bool(hit.all()) else plain[hit]
    del hit
    if len(mine) == 0:
        return None
    a = rows_of(a_all, mine)  # one run of rows (a thread's launches in the window): views, no copies
    if len(a) < 2 or bool((a[1:] >= a[:-1]).all()):  # in call order already
        return a, rows_of(e_all, mine), rows_of(g_all, mine), rows_of(d_all, mine)
    o = mine[np.argsort(a, kind="stable")]
    return a_all[o], e_all[o], g_all[o], d_all[o]


def _in_iterations(a: np.ndarray, s_it: np.ndarray, e_it: np.ndarray) -> tuple[np.ndarray, slice | np.ndarray | None]:
    """For call starts ``a`` (in order) and iterations [s_it, e_it] (in start order): the iteration of
    each call that one holds (the last starting by the call, which has not ended before it) and
    those calls' rows (None: all; a slice when they are one run, else a boolean mask). Per iteration, by binary searches
    of its bounds among the calls (the calls of iteration i are those from the first starting at or
    after its start to the next iteration's first, cut at its end), instead of one search per call."""
    n = len(a)
    lo = np.searchsorted(a, s_it, side="left")
    hi = np.minimum(np.append(lo[1:], n), np.searchsorted(a, e_it, side="right"))
    np.maximum(hi, lo, out=hi)
    size = hi - lo
    # iteration numbers as int32 where they fit (a million launches: 4.6 MiB less than int64)
    k = np.repeat(np.arange(len(s_it), dtype=np.int32 if len(s_it) < 1 << 31 else np.int64), size)
    if len(k) == n:
        return k, None
    if len(k) == 0:
        return k, np.zeros(0, dtype=bool)
    has = np.flatnonzero(size > 0)
    start, stop = int(lo[has[0]]), int(hi[has[-1]])
    if stop - start == len(k):  # one run: the calls before and after the loop left out
        return k, slice(start, stop)
    # else a mask (a byte a call, no positions): runs of calls left out and kept, alternating
    runs = np.empty(2 * len(lo) + 1, dtype=np.int64)
    runs[0:-1:2] = lo - np.concatenate([[0], hi[:-1]])  # before each iteration's calls
    runs[1::2] = size
    runs[-1] = n - hi[-1]
    return k, np.repeat(np.tile(np.array([False, True]), len(lo) + 1)[:len(runs)], runs)


def _kept(rows: slice | np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
    """The columns' ``rows`` (a slice or a mask): views for a slice (the launches before or after the loop left out),
    else copies made one column at a time, each column let go as its copy is made (``cols`` is
    emptied)."""
    if isinstance(rows, slice):
        return [c[rows] for c in cols]
    out = []
    while cols:
        out.append(cols.pop(0)[rows])
    return out


def _runs(a: np.ndarray, e: np.ndarray, d: np.ndarray, k: np.ndarray, w: Window,
          max_gap_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Runs of launches (call starts ``a``, ends ``e``, devices ``d``, iterations ``k``), clipped to
    the window ``w``: (start, end, device, iteration) of each. A run breaks between iterations, at a
    change of device, and where the thread spent far longer than usual between two launches (other
    host work, not launching)."""
    host = a[1:] - e[:-1]
    same = k[1:] == k[:-1]
    med = float(np.median(host[same])) if same.any() else 0.0
    long = host > min(ONE_TIME_OUTLIER * max(med, 1000.0), max_gap_ns)
    brk = np.concatenate([[True], ~same | (d[1:] != d[:-1]) | long])
    starts = np.flatnonzero(brk)
    rs = a[starts]
    re_ = np.maximum.reduceat(e, starts)
    rd, rk = d[starts], k[starts]
    rs, re_ = np.maximum(rs, w.start_ns), np.minimum(re_, w.end_ns)
    keep = re_ > rs
    return rs[keep], re_[keep], rd[keep], rk[keep]


def _idle_in_runs(busy: Busy, rs: np.ndarray, re_: np.ndarray, rd: np.ndarray, claim_s: dict[int, list[np.ndarray]],
                  claim_e: dict[int, list[np.ndarray]]) -> np.ndarray:
    """Each run's GPU idle time on its device; the idle stretches (holes) into ``claim_s``/``claim_e``."""
    idle = np.zeros(len(rs), dtype=np.int64)
    for dev in np.unique(rd).tolist():
        ms, me = busy.per_dev.get(dev, {}).get("all", (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        on = np.flatnonzero(rd == dev)
        idle[on] = (re_[on] - rs[on]) - iv.covered_between(ms, me, rs[on], re_[on])
        holes = iv.subtract(iv.merge(rs[on], re_[on]), (ms, me))
        claim_s.setdefault(dev, []).append(holes[0])
        claim_e.setdefault(dev, []).append(holes[1])
    return idle


def _launch_spans(a: np.ndarray, e: np.ndarray, k: np.ndarray, n_it: int) -> np.ndarray:
    """Per iteration: from its first launch call's start to its launch calls' last end (0: none)."""
    first_a = np.full(n_it, -1, dtype=np.int64)
    last_e = np.full(n_it, -1, dtype=np.int64)
    ks = np.flatnonzero(np.concatenate([[True], k[1:] != k[:-1]]))
    first_a[k[ks]] = a[ks]
    last_e[k[ks]] = np.maximum.reduceat(e, ks)
    return np.where(first_a >= 0, last_e - first_a, 0)


def _best_sequence(per_idle: list[np.ndarray], per_n: list[np.ndarray]) -> tuple[int, int, int]:
    """The sequence (thread) with the largest estimate: (estimate, its iterations, its index)."""
    estimate, per_seq, best = 0, 0, 0
    for k, (v, c) in enumerate(zip(per_idle, per_n)):
        v = v[c > 0]
        e = min(int(v.sum()), int(len(v) * float(np.median(v)))) if len(v) else 0
        if e > estimate or not per_seq:
            estimate, per_seq, best = e, len(v), k
    return estimate, per_seq, best


MAX_NAMED_RANGES = 200_000  # NVTX ranges swept to name where the launches happen (more: not named)


def _where(ctx: RuleContext, threads: list[tuple[int, int]], starts: list[np.ndarray]) -> tuple[str, float]:
    """The innermost push/pop NVTX range holding most of these launch calls (on their threads), and
    its share of them."""
    ranges = ctx.a.nvtx_ranges
    if len(ranges) == 0:
        return "", 0.0
    w = ctx.window
    near = np.flatnonzero((ranges["start_ns"].to_numpy() < w.end_ns) & (ranges["end_ns"].to_numpy() > w.start_ns))
    near = near[(ranges["style"].iloc[near] == "PushPop").to_numpy(dtype=bool)]
    rpid, rtid = ranges["pid"].to_numpy()[near], ranges["tid"].to_numpy()[near]
    per_name: list[pd.Series] = []
    total = 0
    for (p_, t_), a in zip(threads, starts):
        total += len(a)
        r = ranges.iloc[near[(rpid == p_) & (rtid == t_)]]
        if len(r) == 0 or len(r) > MAX_NAMED_RANGES:
            continue
        o = np.argsort(r["start_ns"].to_numpy(), kind="stable")
        seg_s, seg_e, owner = iv.innermost(r["start_ns"].to_numpy()[o], r["end_ns"].to_numpy()[o])
        if len(seg_s) == 0:
            continue
        # launches per range, then per name: each disjoint segment's calls by two searches of its
        # bounds among the (ordered) call starts
        inside = np.searchsorted(a, seg_e, side="left") - np.searchsorted(a, seg_s, side="left")
        counts = np.bincount(owner, weights=inside, minlength=len(r)).astype(np.int64)
        per_name.append(pd.Series(counts).groupby(r["name"].astype(str).to_numpy()[o]).sum())
    if not per_name or total == 0:
        return "", 0.0
    got = pd.concat(per_name).groupby(level=0).sum().sort_values(ascending=False, kind="stable")
    if len(got) == 0 or got.iloc[0] == 0:
        return "", 0.0
    return str(got.index[0]), float(got.iloc[0]) / total
