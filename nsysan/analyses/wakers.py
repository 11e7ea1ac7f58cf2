"""Who a blocked thread waits for: the thread that woke it, and what that thread was doing.

A thread blocked in ``sem_wait`` (Python's ``queue.get()``, ``Event.wait()``, a lock), a condition
variable, a futex or a ``read`` on a pipe is switched back onto a CPU after another thread released
it. ``SCHED_EVENTS`` records the switches, not the wake-up itself, and the release that does it is
often not traced (Python's ``sem_post`` is not an OS runtime call nsys records), so the waker is
found by timing, over all the waits together:

* a **wake** is a switch-in of the waiting thread that ends an off-CPU period of at least
  ``min_wait_ns`` inside the given intervals (the host-caused GPU gaps up to their launching calls);
* a thread was **near** a wake when it was on a CPU at the switch-in or at most ``near_ns`` before it
  (the releasing thread runs when it releases; the woken one is switched in microseconds later);
* every other thread of the traced processes (nsys' own threads left out) is scored by the share of
  the wakes it was near (``near_share``), plus how much more often that is than near any instant of
  the waits (``near_share - baseline``, when positive; ``baseline`` is the share of the waits' off-CPU
  time within ``near_ns`` after that thread ran). A producer that computes all the time is near every
  wake (score 1); one that sleeps and runs only to hand over a batch is near every wake and rarely
  otherwise (score near 2); a thread that ran now and then scores little. Two threads that both run
  all the time cannot be told apart this way: the first in (pid, tid) order is named.
  A traced release call of that thread (``pthread_cond_signal``, ``sem_post``, a ``write``, ...)
  ending within ``near_ns`` before a wake is counted too (``signalled``).

Each wake goes to the thread whose traced release call ended last before it (within ``near_ns``),
else to the best-scored thread near it. The **waker** is the thread given the most of the waiter's blocked time,
when that is at least ``MIN_BLOCKED_SHARE`` of it (a loop that also waits for its autograd thread
in ``backward()`` waits mostly for its producer).
What it was doing during the waits it ended: on or off CPU (and in which call), its NVTX ranges (by
overlap), and its Python samples in those waits (``analyses/samples.py``), read from the export for
that thread only. Its range's median duration per instance (``cycle_ns``, one batch of a producer)
and the time between wakes (``period_ns``) give what a faster producer saves: with k producers (or
``make_batch`` k times faster) one batch arrives every ``cycle/k``, the loop's own work takes
``period - wait``, so it waits ``max(0, cycle/k - (period - wait))`` a batch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.sched import Schedule, ThreadTime

if TYPE_CHECKING:
    from nsysan.analyses.samples import Attribution
    from nsysan.trace.model import Trace
    from nsysan.trace.samples import Samples

NEAR_NS = 200_000
MIN_WAIT_NS = 50_000
MIN_BLOCKED_SHARE = 0.5
# nsys' own threads in the profiled process: its injection, its sampler and its comms
PROFILER_THREAD = re.compile(r"^(\[NSys|NSys |\*\d)")
# traced calls that release a waiting thread
RELEASE_CALLS = frozenset({"pthread_cond_signal", "pthread_cond_broadcast", "sem_post", "pthread_mutex_unlock",
                           "futex", "write", "writev", "send", "sendto", "sendmsg", "pthread_barrier_wait"})


@dataclass(frozen=True)
class Waker:
    """The thread that released a waiting thread (``waiter``) in most of its waits, and what it was doing."""

    waiter: tuple[int, int]
    pid: int
    tid: int
    name: str
    wakes: int  # the waiter's wakes given to this thread
    of_wakes: int  # all the waiter's wakes in the intervals
    blocked_ns: int  # the waiter's off-CPU time ended by those wakes
    of_blocked_ns: int  # the waiter's off-CPU time ended by all its wakes
    near_share: float
    baseline: float
    signalled: int  # of its wakes, those with a traced release call of this thread just before
    doing: ThreadTime  # the waker during the waits it ended
    ranges: list[tuple[str, int]] = field(default_factory=list)  # its NVTX ranges in those waits, by overlap
    samples: Attribution | None = None  # its samples in those waits, or None
    cycle_ns: int = 0  # median duration of its top range's instances (one batch), 0 without a range
    period_ns: int = 0  # median time between the wakes it made
    wait_ns: int = 0  # median off-CPU time of the waiter per wake it made
    periods: Any = field(default=None, repr=False, compare=False)  # (starts, ends) of the waits it ended

    @property
    def score(self) -> float:
        """``near_share`` plus how much more often than its baseline it was near (0 when not more)."""
        return self.near_share + max(0.0, self.near_share - self.baseline)

    def wait_with(self, k: int) -> int:
        """The predicted wait per batch with ``k`` producers like this one (0: no cycle known)."""
        if not self.cycle_ns or not self.period_ns:
            return 0
        own = max(0, self.period_ns - self.wait_ns)
        return max(0, int(self.cycle_ns / k) - own)

    def to_dict(self) -> dict[str, Any]:
        return {"waiter_pid": self.waiter[0], "waiter_tid": self.waiter[1], "pid": self.pid, "tid": self.tid,
                "name": self.name, "wakes": self.wakes, "of_wakes": self.of_wakes, "blocked_ns": self.blocked_ns,
                "of_blocked_ns": self.of_blocked_ns, "near_share": round(self.near_share, 4),
                "baseline": round(self.baseline, 4), "signalled": self.signalled, "doing": self.doing.to_dict(),
                "ranges": [{"name": n, "ns": v} for n, v in self.ranges],
                "top_python": self.samples.top(3) if self.samples is not None else "",
                "cycle_ns": self.cycle_ns, "period_ns": self.period_ns, "wait_ns": self.wait_ns}


def wakes(schedule: Schedule, pid: int, tid: int, starts: np.ndarray, ends: np.ndarray,
          min_wait_ns: int = MIN_WAIT_NS) -> tuple[np.ndarray, np.ndarray]:
    """The waiter's off-CPU periods [off_start, switch_in) of at least ``min_wait_ns`` whose switch-in
    falls inside the intervals [starts, ends), sorted."""
    on_s, on_e = schedule.on_intervals(pid, tid)
    if len(on_s) < 2 or len(starts) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    off_s, off_e = on_e[:-1], on_s[1:]
    ms, me = iv.merge(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
    k = np.searchsorted(ms, off_e, side="right") - 1
    inside = (k >= 0) & (off_e < me[np.clip(k, 0, None)]) & (off_e - off_s >= min_wait_ns)
    return off_s[inside], off_e[inside]


def _nearness(on_s: np.ndarray, on_e: np.ndarray, t: np.ndarray, near_ns: int) -> np.ndarray:
    """How long before each instant ``t`` the thread was last on a CPU (0: on a CPU at ``t``; a huge
    number: never before)."""
    i = np.searchsorted(on_s, t, side="right") - 1
    last = np.where(i >= 0, np.minimum(on_e[np.clip(i, 0, None)], t), np.iinfo(np.int64).min // 2)
    return t - last


def find_waker(schedule: Schedule, pid: int, tid: int, starts: np.ndarray, ends: np.ndarray, *,
               names: dict[tuple[int, int], str], osrt: pd.DataFrame | None = None,
               near_ns: int = NEAR_NS, min_wait_ns: int = MIN_WAIT_NS) -> Waker | None:
    """The thread that woke ``(pid, tid)`` in most of its waits inside [starts, ends) (see the module
    docstring), with what it did then (``doing``, ranges and samples are filled by ``describe``)."""
    ws, we = wakes(schedule, pid, tid, starts, ends, min_wait_ns)
    if len(we) == 0:
        return None
    off_total = int((we - ws).sum())
    cands, near, scores = [], [], []
    for key in schedule.threads():
        if key == (int(pid), int(tid)) or PROFILER_THREAD.match(names.get(key, "")):
            continue
        on_s, on_e = schedule.on_intervals(*key)
        if len(on_s) == 0:
            continue
        is_near = _nearness(on_s, on_e, we, near_ns) <= near_ns
        if not is_near.any():
            continue
        zone = iv.merge(on_s, on_e + near_ns)
        base = iv.total(*iv.intersect(zone, (ws, we))) / off_total if off_total else 0.0
        cands.append(key)
        near.append(is_near)
        scores.append(float(is_near.mean()) + max(0.0, float(is_near.mean()) - base))
    if not cands:
        return None
    sc = np.asarray(scores)
    nm = np.vstack(near)  # candidates x wakes
    # each wake to the thread whose traced release call ended last before it (within near_ns), else
    # to the best-scored thread near it
    rel = np.vstack([_release_lag(osrt, key, we, near_ns) for key in cands])  # candidates x wakes
    by_call = rel.min(axis=0) < np.iinfo(np.int64).max
    best = np.where(by_call, rel.argmin(axis=0), np.where(nm, sc[:, None], -np.inf).argmax(axis=0))
    given = nm.any(axis=0) | by_call
    dur = we - ws
    by = np.bincount(best[given], weights=dur[given], minlength=len(cands))
    j = int(by.argmax())
    share = float(nm[j].mean())
    if by[j] < MIN_BLOCKED_SHARE * off_total:
        return None
    mine = given & (best == j)
    key = cands[j]
    return Waker(waiter=(int(pid), int(tid)), pid=key[0], tid=key[1], name=names.get(key, ""),
                 wakes=int(mine.sum()), of_wakes=len(we), blocked_ns=int(dur[mine].sum()), of_blocked_ns=off_total,
                 near_share=share, baseline=share - float(sc[j] - share),
                 signalled=int(by_call[mine].sum()),
                 doing=schedule.thread_time(key[0], key[1], ws[mine], we[mine]),
                 period_ns=int(np.median(np.diff(we[mine]))) if mine.sum() > 1 else 0,
                 wait_ns=int(np.median(dur[mine])), periods=(ws[mine], we[mine]))


def _release_lag(osrt: pd.DataFrame | None, key: tuple[int, int], t: np.ndarray, near_ns: int) -> np.ndarray:
    """Per instant ``t``: how long before it the last traced release call of thread ``key`` ended, when
    at most ``near_ns`` (int64 max otherwise)."""
    none = np.full(len(t), np.iinfo(np.int64).max, np.int64)
    if osrt is None or len(osrt) == 0 or len(t) == 0:
        return none
    m = (osrt["pid"].to_numpy() == key[0]) & (osrt["tid"].to_numpy() == key[1])
    if not m.any():
        return none
    m &= osrt["name"].astype(str).isin(RELEASE_CALLS).to_numpy()
    ends = np.sort(osrt["end_ns"].to_numpy(np.int64)[m])
    if len(ends) == 0:
        return none
    i = np.searchsorted(ends, t, side="right") - 1
    lag = t - ends[np.clip(i, 0, None)]
    return np.where((i >= 0) & (lag <= near_ns), lag, none)


def describe(w: Waker, nvtx: pd.DataFrame, samples: Samples | None = None) -> Waker:
    """``w`` with the waker's NVTX ranges and Python samples in the waits it ended (``w.periods``),
    and its top range's median duration per instance."""
    from dataclasses import replace

    starts, ends = w.periods

    ranges: list[tuple[str, int]] = []
    cycle = 0
    if len(nvtx):
        r = nvtx.loc[(nvtx["pid"].to_numpy() == w.pid) & (nvtx["tid"].to_numpy() == w.tid)
                     & nvtx["end_ns"].notna().to_numpy()]
        r = r.loc[r["style"].astype(str).to_numpy() != "Mark"] if "style" in r else r
        ms, me = iv.merge(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
        for name, g in r.groupby(r["name"].astype(str), sort=True):
            gs, ge = iv.merge(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
            ns = int(iv.total(*iv.intersect((gs, ge), (ms, me))))
            if ns:
                ranges.append((str(name), ns))
        ranges.sort(key=lambda kv: (-kv[1], kv[0]))
        if ranges:
            g = r.loc[r["name"].astype(str).to_numpy() == ranges[0][0]]
            cycle = int(np.median(g["end_ns"].to_numpy(np.int64) - g["start_ns"].to_numpy(np.int64)))
    att = None
    if samples is not None and len(samples.python):
        from nsysan.analyses.samples import _attribute

        df = samples.python
        df = df.loc[(df["pid"].to_numpy() == w.pid) & (df["tid"].to_numpy() == w.tid)]
        ms, me = iv.merge(np.asarray(starts, np.int64), np.asarray(ends, np.int64))
        t = df["ts_ns"].to_numpy(np.int64)
        k = np.searchsorted(ms, t, side="right") - 1
        inside = (k >= 0) & (t < me[np.clip(k, 0, None)])
        att = _attribute(df.loc[inside], samples.stacks, "python", "waker", w.name, "gaps")
    return replace(w, ranges=ranges[:5], samples=att, cycle_ns=cycle)


def waker_of(trace: Trace, schedule: Schedule, pid: int, tid: int, starts: np.ndarray,
             ends: np.ndarray) -> Waker | None:
    """``find_waker`` then ``describe`` on a loaded trace: its thread names, OS runtime calls, NVTX
    ranges and (read for the waker's thread only, in the waits' span) Python samples."""
    w = find_waker(schedule, pid, tid, starts, ends, names=trace.thread_names(), osrt=trace.osrt)
    if w is None:
        return None
    ws, we = w.periods
    samples: Samples | None = None
    path = trace.meta.path
    tables = set(trace.meta.tables)
    if path and "NVTX_PAYLOAD_SCHEMA_ENTRIES" in tables and len(we):
        import sqlite3

        from nsysan.trace.samples import read_samples

        try:
            samples = read_samples(path, window=(int(ws.min()), int(we.max())), threads=[(w.pid, w.tid)])
        except (sqlite3.Error, ValueError, KeyError, IndexError, TypeError):  # damaged sampling tables
            samples = None
    return describe(w, trace.nvtx, samples)


def note(w: Waker) -> str:
    """The finding's words: who the thread waited for, what that thread did meanwhile, and what more
    producers (or a faster one) would save a batch."""
    from nsysan.units import fmt_ns

    who = f"{w.name or 'thread'} (pid {w.pid}, tid {w.tid})"
    out = (f" It waited mostly for {who}: {w.wakes} of its {w.of_wakes} wake-ups, ending {fmt_ns(w.blocked_ns)} of "
           f"its {fmt_ns(w.of_blocked_ns)} off the CPU, came right after that thread ran"
           + (f" ({w.signalled} right after its traced release call)" if w.signalled else "")
           + f". In those waits {w.name or 'it'} was on a CPU {w.doing.running_share:.0%} of the time")
    off = w.doing.top_calls(1)
    if w.doing.off_share >= 0.2 and off:
        out += f" (off it mostly in {off[0][0]})"
    if w.ranges:
        out += ", inside " + ", ".join(f"{n} {fmt_ns(v)}" for n, v in w.ranges[:2])
    top = w.samples.top(3) if w.samples is not None else ""
    out += f"; its Python samples there: {top}." if top else "."
    if w.ranges and w.cycle_ns and w.period_ns and w.wait_ns:
        rng = w.ranges[0][0]
        own = max(0, w.period_ns - w.wait_ns)
        k = max(2, -(-w.cycle_ns // own)) if own else 2
        two = w.wait_with(2)
        out += (f" {rng} takes {fmt_ns(w.cycle_ns)} a batch (median) while the loop's own work takes {fmt_ns(own)} "
                f"(the {fmt_ns(w.period_ns)} between wake-ups less the {fmt_ns(w.wait_ns)} wait): "
                f"{rng} on {w.name or 'that thread'} "
                f"is the bottleneck. With 2 producers (or {rng} 2x faster) the wait would fall to "
                f"{fmt_ns(two)} a batch "
                f"(saving {fmt_ns(w.wait_ns - two)} a batch)")
        out += (f"; with {k}, to {fmt_ns(w.wait_with(k))}." if k > 2 else ".")
    return out
