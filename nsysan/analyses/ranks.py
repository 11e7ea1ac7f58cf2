"""Ranks: several processes (one per GPU, as torchrun starts them), aligned on their iterations and
collectives, with the waiting split from the transfer and the straggler named with its cause.

**Ranks.** Every process that ran communication kernels is a rank; ranks are numbered in the order
of their export's file name (numbers as numbers: ``rank2`` before ``rank10``), then (device, pid).
One export holding every rank (``nsys profile`` of ``torchrun``) or one export per rank
(``cross_rank`` on per-file tables) give the same result.

**Alignment.** Collectives are matched by order over the whole capture, then clipped to the
ranks' common steady window (by the time the last rank arrived): the k-th collective of a type on
each rank is the same collective (NCCL requires every rank of a communicator to issue them in the
same order), whatever each rank's own steady window holds. Single-rank reductions (``Reduce (1
rank)``) have no peers and are left out. Where ranks issued different numbers of a type over the
capture, that type is not aligned, and the table and the verdict say why.

**Waiting vs transfer.** A collective's kernel starts on each rank when that rank arrives and ends
on all of them about when the data has moved. For the k-th collective: ``last_start`` = the latest
start over the ranks; a rank's ``wait_ns`` = last_start - its start (it spins in the kernel until
the last rank arrives), its ``transfer_ns`` = its end - last_start.

**Waiting that costs time.** A rank waits inside a collective while its compute may still run
beside it (DDP's first buckets start during backward). The wait that costs the step is the part with
no compute on the rank's device: ``exposed_wait_ns`` (the wait intervals minus the device's compute).
A rank's exposed communication splits into that waiting and the rest (``comm_exposed_transfer``):
only the latter is what overlapping communication with compute could hide.

**Per rank** (means per steady iteration of that rank): period, compute, exposed transfer, exposed
waiting, exposed copies and idle (from ``breakdown``: they add up to the iteration's span), the
communication kernel time, and the GPU idle while the rank's host was late (host-bound gaps, with
what its thread was doing).

**Straggler.** Judged on the collectives only (point-to-point Send/Recv waiting is a pipeline's
dependency, its bubble: measured in the waiting columns, never called a straggler). The rank that
arrives last most often (in at least half of the aligned collectives of the steady state), when it
costs the others materially: their exposed waiting, less the straggler's own, is at least 5% of an
iteration (ranks that take turns arriving last wait for each other about equally: that is noise,
not a straggler). Its cause is found by comparing its own per-iteration numbers with the other
ranks' medians: GPU idle while its host was late, GPU compute, exposed communication. The
**saving** of evening it out is, per iteration, the straggler's excess in its cause, at most the
others' median waiting (without a visible cause: the others' exposed waiting less its own), times
its iterations in the common window, and never more than the waiting the other ranks show there
(the median over them of their total waiting in the aligned collectives; without a visible cause,
of their waiting with the GPU idle). When no rank qualifies the ranks are in step and none is
named.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import group_rows, name_in
from nsysan.analyses.gaps import BLOCKING_SYNC_APIS

if TYPE_CHECKING:
    from nsysan.analyses.gpu import Busy, Window
    from nsysan.analyses.iterations import Iterations
    from nsysan.trace.model import Trace

LATE_SHARE = 0.5
MIN_MARGIN_FRAC = 0.05
# Point-to-point transfers: the receiver waits for the sender by design (a pipeline's stages), so
# their waiting is a dependency (the pipeline bubble), not a straggler: it is measured, not judged.
P2P = frozenset({"SendRecv", "Send", "Recv"})


@dataclass(frozen=True)
class RankAnalysis:
    ranks: pd.DataFrame  # one row per rank
    aligned: pd.DataFrame  # one row per (collective, k, rank)
    not_aligned: list[str] = field(default_factory=list)
    straggler: dict[str, Any] | None = None
    verdict: str = ""
    lanes: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> a timeline lane (see _lanes)
    # not part of the result: the payloads it was combined from (``_payloads``) and the analysis fields
    # they were computed from, so ``rank_payloads`` of the same analysis (the summary's) reuses them
    made_from: tuple[RankInputs, list[dict[str, Any]]] | None = field(default=None, repr=False, compare=False)

    def waiting(self, pid: int, p2p: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Wall-clock intervals in which process ``pid`` waited in a collective for the last rank
        (merged); ``p2p``: True for point-to-point transfers only, False for the collectives only."""
        al = self.aligned
        if len(al) == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        m = (al["pid"] == pid) & (al["wait_ns"] > 0)
        if p2p is not None:
            m &= al["collective"].isin(list(P2P)) == p2p
        w = al.loc[m]
        s = w["start_ns"].to_numpy(dtype=np.int64)
        return iv.merge(s, s + w["wait_ns"].to_numpy(dtype=np.int64))

    @property
    def collectives_aligned(self) -> int:
        return int(self.aligned[["collective", "k"]].drop_duplicates().shape[0]) if len(self.aligned) else 0


def align(comm: pd.DataFrame, rank_of: dict[int, int], window: tuple[int, int] | None = None
          ) -> tuple[pd.DataFrame, list[str], list[str]]:
    """The k-th collective of each type on every rank, over all of ``comm`` (the whole capture):
    start, end, last_start, wait_ns, transfer_ns, and whether this rank arrived last; then the rows
    whose last arrival is in ``window``. ``comm`` needs pid, start_ns, end_ns, collective. When the
    ranks issued different numbers of a type over the capture, they are aligned on those that run at
    the same time on every rank (``_matching_offsets``), else that type is not aligned. Returns
    (aligned, the types not aligned with why, the types aligned on part of their sequence with why)."""
    cols = ["collective", "k", "rank", "pid", "start_ns", "end_ns", "last_start_ns", "wait_ns", "transfer_ns",
            "last", "lead_ns"]
    if len(comm) == 0 or len(rank_of) < 2:
        return pd.DataFrame(columns=cols), [], []
    c = comm.loc[(comm["collective"] != "Reduce (1 rank)") & comm["pid"].isin(list(rank_of))]
    parts, skipped, trimmed = [], [], []
    for coll, g in c.groupby("collective", sort=True):
        per = {int(p): x.sort_values("start_ns", kind="stable") for p, x in g.groupby("pid", sort=True)}
        counts = {p: len(x) for p, x in per.items()}
        if len(per) < 2:
            continue
        pids = sorted(per)
        if len(set(counts.values())) != 1:
            offsets = _matching_offsets({p: per[p] for p in pids})
            if offsets is None:
                skipped.append(f"{coll}: ranks issued different numbers over the capture "
                               f"({', '.join(f'rank {rank_of[p]}: {k}' for p, k in sorted(counts.items()))}) and no "
                               "shift of one sequence against the other makes the k-th of every rank run at the same "
                               "time, so the k-th of one rank is not known to be the k-th of another")
                continue
            n = min(counts.values())
            trimmed.append(f"{coll}: ranks issued different numbers over the capture "
                           f"({', '.join(f'rank {rank_of[p]}: {k}' for p, k in sorted(counts.items()))}): aligned on "
                           f"the {n} that run at the same time on every rank (the rest lie outside another rank's "
                           "capture)")
            per = {p: per[p].iloc[offsets[p]:offsets[p] + n] for p in pids}
        n = min(len(x) for x in per.values())
        st = np.stack([per[p]["start_ns"].to_numpy(dtype=np.int64) for p in pids])  # ranks x k
        en = np.stack([per[p]["end_ns"].to_numpy(dtype=np.int64) for p in pids])
        last = st.max(axis=0)
        order = np.sort(st, axis=0)
        lead = order[-1] - order[-2]
        late = st.argmax(axis=0)
        for i, p in enumerate(pids):
            parts.append(pd.DataFrame({
                "collective": coll, "k": np.arange(n), "rank": rank_of[p], "pid": p, "start_ns": st[i],
                "end_ns": en[i], "last_start_ns": last, "wait_ns": np.clip(last - st[i], 0, en[i] - st[i]),
                "transfer_ns": np.clip(en[i] - last, 0, None), "last": late == i, "lead_ns": lead}))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)
    if window is not None and len(out):
        out = out.loc[(out["last_start_ns"] >= window[0]) & (out["last_start_ns"] < window[1])]
    return out[cols].reset_index(drop=True), skipped, trimmed


MAX_SHIFT = 64  # collectives one rank may have beyond another's (a capture that starts or stops between them)
MIN_MATCHED = 0.99  # share of the k-th collectives that must run at the same time on both ranks


def _matching_offsets(per: dict[int, pd.DataFrame]) -> dict[int, int] | None:
    """For ranks that issued different numbers of one collective over the capture (one rank's capture
    began or ended between two of them), where each rank's sequence starts so that the k-th of every
    rank is the same collective: a collective's kernels run at the same time on every rank (each
    waits for the others), so the k-th kernels of two ranks must overlap in time. The rank with the
    fewest is the reference; each other rank's shift (at most ``MAX_SHIFT``) is the one under which
    at least ``MIN_MATCHED`` of the pairs overlap, the best such; None when a rank has none."""
    ref = min(per, key=lambda p: (len(per[p]), p))
    n = len(per[ref])
    if n == 0:
        return None
    rs, re_ = per[ref]["start_ns"].to_numpy(dtype=np.int64), per[ref]["end_ns"].to_numpy(dtype=np.int64)
    out = {ref: 0}
    for p, x in per.items():
        if p == ref:
            continue
        ps, pe = x["start_ns"].to_numpy(dtype=np.int64), x["end_ns"].to_numpy(dtype=np.int64)
        best, best_frac = None, 0.0
        for o in range(min(len(x) - n, MAX_SHIFT) + 1):
            frac = float(np.mean((ps[o:o + n] <= re_) & (rs <= pe[o:o + n])))
            if frac > best_frac:
                best, best_frac = o, frac
        if best is None or best_frac < MIN_MATCHED or len(x) - n > MAX_SHIFT:
            return None
        out[p] = best
    return out


@dataclass(frozen=True, eq=False)
class RankInputs:
    """What the rank analysis reads, fields of the analysis (``nsysan.result.Analysis``): its
    communication ops, GPU ops, iterations, per-iteration breakdown and idle gaps, the trace's CUDA
    API table, the busy intervals per device and the steady window."""

    comm: pd.DataFrame
    ops: pd.DataFrame
    iterations: Iterations
    breakdown: pd.DataFrame
    gaps: pd.DataFrame
    cuda_api: pd.DataFrame
    busy: Busy | None
    steady: Window

    @classmethod
    def of(cls, a: RankSources) -> RankInputs:
        """Those fields of the analysis ``a``."""
        return cls(a.comm, a.ops, a.iterations, a.breakdown, a.gaps, a.trace.cuda_api, a.busy, a.steady)

    def same(self, other: RankInputs) -> bool:
        """Whether ``other`` holds the very objects this does (payloads made of one are the other's)."""
        return all(x is y for x, y in zip(self._parts(), other._parts()))

    def _parts(self) -> tuple[object, ...]:
        return (self.comm, self.ops, self.iterations.table, self.breakdown, self.gaps, self.cuda_api, self.busy,
                self.steady)


class RankSources(Protocol):
    """What ``rank_payloads`` reads of a finished analysis (``nsysan.result.Analysis``, a layer above
    the analyses): the fields of ``RankInputs`` and the rank analysis made of them, if any."""

    @property
    def comm(self) -> pd.DataFrame: ...
    @property
    def ops(self) -> pd.DataFrame: ...
    @property
    def iterations(self) -> Iterations: ...
    @property
    def breakdown(self) -> pd.DataFrame: ...
    @property
    def gaps(self) -> pd.DataFrame: ...
    @property
    def trace(self) -> Trace: ...
    @property
    def busy(self) -> Busy | None: ...
    @property
    def steady(self) -> Window: ...
    @property
    def ranks(self) -> RankAnalysis | None: ...


def rank_payloads(a: RankSources, offset_ns: int = 0, trace: str = "") -> list[dict[str, Any]]:
    """Per process that ran communication kernels: its per-iteration numbers, its steady iterations'
    completions and its communication ops over the whole capture (start, end, collective; times +
    ``offset_ns``, so payloads of several exports share one clock): aligned over the capture, then
    clipped to the common window (``combine``). Small: a few numbers and 3 values per collective,
    whatever the trace's size: what a cluster worker returns per rank. Those ``analyze_ranks`` made of
    the same analysis are reused (64 ranks: 1 s each time)."""
    made = a.ranks.made_from if a.ranks is not None else None
    inputs = RankInputs.of(a)
    raw = made[1] if made is not None and made[0].same(inputs) else _payloads(inputs)
    return [_shifted(p, offset_ns, trace) for p in raw]


def _shifted(p: dict[str, Any], offset_ns: int, trace: str) -> dict[str, Any]:
    """A payload of ``_payloads`` (times on the trace's clock) with its times + ``offset_ns`` and its
    trace named: new lists throughout, each sum made in the type it had there (the arrays' in numpy,
    Python ints' in Python)."""
    def arr(values: np.ndarray) -> list[int]:
        return (values + offset_ns).tolist()

    def pairs(values: list[list[int]]) -> list[list[int]]:
        return [[x + offset_ns, y + offset_ns] for x, y in values]

    lanes = {k: (v + offset_ns if k in ("t0", "t1") else pairs(v)) for k, v in p["lanes"].items()}
    return {**p, "trace": trace, "window": [w + offset_ns for w in p["window"]],
            "iteration_end_ns": arr(p["iteration_end_ns"]),
            "comm": {"start_ns": arr(p["comm"]["start_ns"]), "end_ns": arr(p["comm"]["end_ns"]),
                     "collective": list(p["comm"]["collective"])},
            "comm_exposed": {"start_ns": arr(p["comm_exposed"]["start_ns"]),
                             "end_ns": arr(p["comm_exposed"]["end_ns"])},
            "breakdown": dict(p["breakdown"]), "lanes": lanes}


def _payloads(a: RankInputs) -> list[dict[str, Any]]:
    """``rank_payloads`` with times on the trace's own clock and no trace named, the per-op times as
    arrays (``_shifted`` makes them lists; small enough to keep in ``RankAnalysis.made_from``)."""
    comm = a.comm
    if len(comm) == 0:
        return []
    procs = comm.groupby("pid", sort=True)["device_id"].agg(lambda s: int(s.mode().iloc[0])).reset_index()
    table = a.iterations.table
    # each table's rows of each process, found once (a mask over every op, call and gap per rank grew
    # with ranks x rows: 64 ranks, 7.9 s)
    # (only the columns read below: a process's rows of every column of the ops were most of the time)
    rows_of = _rows_by_pid(_only(a.ops, "start_ns", "end_ns", "role"),
                           _only(comm, "start_ns", "end_ns", "dur_ns", "exposed_ns", "collective"),
                           _only(table, "warmup", "period_ns", "start_ns", "end_ns"),
                           _only(a.breakdown, "warmup", "span_start_ns", "span_end_ns",
                                 *(f"{c}_ns" for c in ("span", "compute", "comm_exposed", "copy_exposed", "idle"))),
                           _only(a.gaps, "cause", "start_ns", "end_ns", "gap_ns", "activity"))
    api_rows = _pid_rows(a.cuda_api)
    out = []
    for pid, dev in zip(procs["pid"].astype(int), procs["device_id"].astype(int)):
        ops_p, comm_p, table_p, bd_p, g = (f.iloc[r(pid)] for f, r in rows_of)
        it = table_p.loc[~table_p["warmup"].to_numpy(dtype=bool)] if len(table) else table
        n = max(len(it), 1)
        per = it["period_ns"].to_numpy() if len(it) else np.zeros(0)
        per = per[per >= 0]
        lo = int(it["start_ns"].min()) if len(it) else a.steady.start_ns
        hi = int(it["end_ns"].max()) if len(it) else a.steady.end_ns
        mine = ops_p.loc[(ops_p["start_ns"].to_numpy() < hi) & (ops_p["end_ns"].to_numpy() > lo)]
        comp = mine.loc[mine["role"].astype(str).to_numpy() == "compute"]
        compute_ns = iv.total(*iv.clip(comp["start_ns"].to_numpy(), comp["end_ns"].to_numpy(), lo, hi))
        cm = comm_p.loc[(comm_p["start_ns"] >= lo) & (comm_p["start_ns"] < hi)]
        exp_s, exp_e = _exposed_comm(a.busy, dev, cm)
        every = comm_p  # aligned over the whole capture, then clipped
        bd = a.breakdown
        bd = bd_p.loc[~bd_p["warmup"].to_numpy(dtype=bool)] if len(bd) else bd
        parts = {f"{c}_per_iter_ns": int(round(float(bd[f"{c}_ns"].mean()))) if len(bd) else 0
                 for c in ("span", "compute", "comm_exposed", "copy_exposed", "idle")}
        host = g.loc[g["cause"].isin(["host", "sync"]) & (g["start_ns"] >= lo)
                     & (g["end_ns"] <= hi)] if len(a.gaps) else a.gaps
        top = ""
        if len(host) and "activity" in host:
            act = host.groupby("activity", sort=True)["gap_ns"].sum().sort_values(ascending=False)
            top = str(act.index[0]) if len(act) else ""
        out.append({
            "trace": "", "pid": int(pid), "device_id": int(dev), "iterations": int(len(it)),
            "period_p50_ns": int(np.median(per)) if per.size else None,
            "compute_per_iter_ns": int(compute_ns / n), "comm_per_iter_ns": int(cm["dur_ns"].sum() / n),
            "comm_exposed_per_iter_ns": int(cm["exposed_ns"].sum() / n), "breakdown": parts,
            "host_idle_per_iter_ns": int(host["gap_ns"].sum() / n) if len(host) else 0,
            "host_wait_per_iter_ns": max(-1, _host_wait(a.cuda_api, api_rows(pid), lo, hi) // n),
            "host_idle_activity": top, "window": [lo, hi],
            "iteration_end_ns": it["end_ns"].to_numpy(dtype=np.int64) if len(it) else np.zeros(0, np.int64),
            "comm": {"start_ns": every["start_ns"].to_numpy(), "end_ns": every["end_ns"].to_numpy(),
                     "collective": every["collective"].astype(str).tolist()},
            "comm_exposed": {"start_ns": exp_s, "end_ns": exp_e}, "lanes": _lanes(a.busy, dev, bd)})
    return out


HOST_WAIT_MIN_NS = 100_000  # a CUDA call this long blocks the host (a full launch queue, a wait)
SYNC_COPIES = ("cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemset", "cuMemcpy", "cuMemcpyDtoH",
               "cuMemcpyHtoD", "cuMemcpyDtoD")


def _pid_rows(df: pd.DataFrame) -> Callable[[int], np.ndarray]:
    """A function: process id -> the positions of ``df``'s rows of that process, in their order
    (empty without any); the rows grouped once."""
    if len(df) == 0 or "pid" not in df:
        return lambda pid: np.zeros(0, dtype=np.int64)
    groups = dict(group_rows(df["pid"].to_numpy()))
    empty = np.zeros(0, dtype=np.int64)
    return lambda pid: groups.get((int(pid),), empty)


def _only(df: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """``df`` with those of ``columns`` it has, and ``pid`` (a new frame of the same arrays: no copy)."""
    keep = [c for c in ("pid", *columns) if c in df.columns]
    return df[keep] if len(keep) < len(df.columns) else df


def _rows_by_pid(*frames: pd.DataFrame) -> list[tuple[pd.DataFrame, Callable[[int], np.ndarray]]]:
    """Each frame with its ``_pid_rows``."""
    return [(f, _pid_rows(f)) for f in frames]


def _host_wait(api: pd.DataFrame, rows: np.ndarray, lo: int, hi: int) -> int:
    """The time one process's threads (``rows``: its rows of the CUDA API table ``api``) spent blocked in CUDA
    calls in [lo, hi): synchronization calls, synchronous copies and memsets, and any call of at least
    ``HOST_WAIT_MIN_NS`` (a full launch queue), clipped. What a rank's host waited for its GPU: the
    most its step can shrink when its GPU stops waiting for a straggler (the rest of its step is its
    own host work). -1 when none of its CUDA calls is traced in the window (its host is not known: no
    bound)."""
    if len(api) == 0 or len(rows) == 0:
        return -1
    st, en = api["start_ns"].to_numpy()[rows], api["end_ns"].to_numpy()[rows]
    keep = (st < hi) & (en > lo)
    rows = rows[keep]
    if rows.size == 0:  # no CUDA call of this rank traced in the window: its host is not known
        return -1
    s, e = np.maximum(st[keep], lo), np.minimum(en[keep], hi)
    sel = name_in(api["name"].iloc[rows], (*BLOCKING_SYNC_APIS, *SYNC_COPIES)) | ((e - s) >= HOST_WAIT_MIN_NS)
    return int((e[sel] - s[sel]).sum())


LANE_ITERATIONS = 2
LANE_MAX = 4000


def _lanes(busy: Busy | None, dev: int, bd: pd.DataFrame) -> dict[str, Any]:
    """What one rank's device ``dev`` ran (``busy``) over ``LANE_ITERATIONS`` iterations in the middle of
    its steady state (merged intervals per role, on the trace's clock; `_shifted` moves them to the common
    one): a timeline lane per rank, a few KB."""
    d = busy.per_dev.get(dev) if busy is not None else None
    if d is None or len(bd) == 0:
        return {}
    mid = max(0, len(bd) // 2 - LANE_ITERATIONS // 2)
    sel = bd.iloc[mid:mid + LANE_ITERATIONS]
    lo, hi = int(sel["span_start_ns"].min()), int(sel["span_end_ns"].max())
    out: dict[str, Any] = {"t0": lo, "t1": hi,
                           "iterations": [[int(x), int(y)]
                                          for x, y in zip(sel["span_start_ns"], sel["span_end_ns"])]}
    for role in ("compute", "comm", "memcpy"):
        if role not in d:
            continue
        rs, re_ = iv.clip_merged(*d[role], lo, hi)
        out[role] = [[int(x), int(y)] for x, y in zip(rs[:LANE_MAX], re_[:LANE_MAX])]
    return out


def _exposed_comm(busy: Busy | None, dev: int, cm: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The parts of this rank's communication kernels during which no compute ran on its device (``busy``)."""
    s = cm["start_ns"].to_numpy(dtype=np.int64)
    e = cm["end_ns"].to_numpy(dtype=np.int64)
    d = busy.per_dev.get(dev) if busy is not None else None
    if d is None or len(s) == 0:
        return iv.merge(s, e)
    return iv.subtract(iv.merge(s, e), d["compute"])


def combine(payloads: list[dict[str, Any]], iter_ns: float | None = None) -> RankAnalysis:
    """Ranks from per-process payloads (one export or many): numbered by (trace, device, pid), their
    collectives aligned, the straggler named."""
    if not payloads:
        return RankAnalysis(pd.DataFrame(), pd.DataFrame(), [], None, "no communication kernels: no ranks")
    ps = sorted(payloads, key=lambda p: (_natural(p["trace"]), p["device_id"], p["pid"]))
    rank_of = {i: i for i in range(len(ps))}
    frames = [pd.DataFrame({"pid": i, "start_ns": np.asarray(p["comm"]["start_ns"], dtype=np.int64),
                            "end_ns": np.asarray(p["comm"]["end_ns"], dtype=np.int64),
                            "collective": p["comm"]["collective"]}) for i, p in enumerate(ps)]
    comm = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    lo = max(p["window"][0] for p in ps)
    hi = min(p["window"][1] for p in ps)
    aligned, skipped, trimmed = align(comm, rank_of, (lo, hi) if hi > lo else None)
    if len(aligned):
        aligned = aligned.assign(pid=[ps[i]["pid"] for i in aligned["pid"].to_numpy()])
    rows = []
    for i, p in enumerate(ps):
        al = aligned.loc[aligned["rank"] == i] if len(aligned) else aligned
        ends = np.asarray(p.get("iteration_end_ns") or [], dtype=np.int64)
        # per iteration of the common window (the aligned collectives are clipped to it)
        n_win = int(((ends > lo) & (ends <= hi)).sum()) if ends.size and hi > lo else int(p["iterations"])
        n = max(n_win, 1)
        ws = al["start_ns"].to_numpy(dtype=np.int64) if len(al) else np.empty(0, np.int64)
        wait = iv.merge(ws, ws + (al["wait_ns"].to_numpy(dtype=np.int64) if len(al) else ws))
        ex = p.get("comm_exposed") or {"start_ns": [], "end_ns": []}
        exposed = (np.asarray(ex["start_ns"], dtype=np.int64), np.asarray(ex["end_ns"], dtype=np.int64))
        exp_wait = iv.total(*iv.intersect(wait, exposed))
        bd = p.get("breakdown") or {}
        comm_exp = int(bd.get("comm_exposed_per_iter_ns", p["comm_exposed_per_iter_ns"]))
        w_it = int(exp_wait / n)
        rows.append({"rank": i, "trace": p["trace"], "pid": p["pid"], "device_id": p["device_id"],
                     "iterations": p["iterations"], "period_p50_ns": p["period_p50_ns"],
                     "span_per_iter_ns": int(bd.get("span_per_iter_ns", 0)),
                     "compute_per_iter_ns": p["compute_per_iter_ns"], "comm_per_iter_ns": p["comm_per_iter_ns"],
                     "comm_exposed_per_iter_ns": comm_exp,
                     "comm_transfer_exposed_per_iter_ns": max(0, comm_exp - w_it),
                     "wait_exposed_per_iter_ns": w_it,
                     "copy_exposed_per_iter_ns": int(bd.get("copy_exposed_per_iter_ns", 0)),
                     "idle_per_iter_ns": int(bd.get("idle_per_iter_ns", 0)),
                     "wait_per_iter_ns": int(al["wait_ns"].sum() / n) if len(al) else 0,
                     "transfer_per_iter_ns": int(al["transfer_ns"].sum() / n) if len(al) else 0,
                     "host_idle_per_iter_ns": p["host_idle_per_iter_ns"], "host_idle_activity": p["host_idle_activity"],
                     "host_wait_per_iter_ns": int(p.get("host_wait_per_iter_ns", -1)),
                     "arrived_last": int(al["last"].sum()) if len(al) else 0, "collectives": int(len(al)),
                     "window_iterations": n_win, "wait_ns": int(al["wait_ns"].sum()) if len(al) else 0,
                     "wait_exposed_ns": int(exp_wait)})
    ranks = pd.DataFrame(rows)
    lanes = {i: p.get("lanes") or {} for i, p in enumerate(ps)}
    if iter_ns is None:
        pers = [p["period_p50_ns"] for p in ps if p["period_p50_ns"]]
        iter_ns = float(np.median(pers)) if pers else None
    straggler, verdict = _straggler(ranks, aligned, iter_ns, skipped)
    if skipped and len(aligned):
        verdict += " (not aligned: " + "; ".join(skipped) + ")"
    if trimmed and len(aligned):
        verdict += " (" + "; ".join(trimmed) + ")"
    return RankAnalysis(ranks, aligned, skipped, straggler, verdict, lanes)


def _natural(path: str) -> list[Any]:
    """Sort key of a trace path by its file name, numbers as numbers (rank2 before rank10)."""
    name = PurePath(str(path)).name
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name) if t] + [(2, 0, str(path))]


def analyze_ranks(inputs: RankInputs) -> RankAnalysis:
    """Ranks of one analysis (several processes in one export), from the fields it reads (``inputs``)."""
    raw = _payloads(inputs)
    r = combine([_shifted(p, 0, "") for p in raw], inputs.iterations.stats.p50_ns)
    return replace(r, made_from=(inputs, raw))


def _straggler(ranks: pd.DataFrame, aligned: pd.DataFrame, iter_ns: float | None, skipped: list[str] | None = None
               ) -> tuple[dict[str, Any] | None, str]:
    if len(ranks) < 2:
        return None, "one rank"
    if len(aligned) == 0:
        why = "; ".join(skipped or []) or ("no collective ran on two ranks or more in their common steady window "
                                          "(a single-rank reduction has no peers)")
        return None, f"no collective could be aligned across the ranks: {why}"
    coll = aligned.loc[~aligned["collective"].isin(list(P2P))]
    if len(coll) == 0:
        return None, ("only point-to-point transfers (Send/Recv) between the ranks: their waiting is the pipeline's "
                      "dependency (see the waiting columns), not a straggler")
    aligned = coll
    n_coll = int(aligned[["collective", "k"]].drop_duplicates().shape[0])
    last = aligned.loc[aligned["last"]].groupby("rank").size()
    ranks = ranks.assign(arrived_last=ranks["rank"].map(last).fillna(0).astype(int))
    r = ranks.sort_values(["arrived_last", "rank"], ascending=[False, True]).iloc[0]
    others = ranks.loc[ranks["rank"] != r["rank"]]
    lead = aligned.loc[aligned["last"] & (aligned["rank"] == r["rank"]), "lead_ns"].to_numpy()
    margin = int(np.median(lead)) if lead.size else 0
    ref = float(iter_ns or 0) or float(np.median(aligned["end_ns"] - aligned["start_ns"]))
    waited_exposed = int(others["wait_exposed_per_iter_ns"].median())
    own = int(r["wait_exposed_per_iter_ns"])
    net = waited_exposed - own  # ranks that take turns wait for each other about equally: noise
    if r["arrived_last"] < LATE_SHARE * n_coll or net < MIN_MARGIN_FRAC * ref:
        return None, (f"ranks in step: no rank arrives last in at least {LATE_SHARE:.0%} of the {n_coll} aligned "
                      f"collectives while the others wait with their GPU idle, beyond its own such waiting, for "
                      f"{MIN_MARGIN_FRAC:.0%} of an iteration (rank {int(r['rank'])} arrives last in "
                      f"{int(r['arrived_last'])}; the others wait {waited_exposed / 1e6:.3f} ms per iteration with "
                      f"their GPU idle, it waits {own / 1e6:.3f} ms; iteration {ref / 1e6:.3f} ms)")
    waited = int(aligned.loc[aligned["rank"] != r["rank"], "wait_ns"].sum())
    waited_per_iter = int(others["wait_per_iter_ns"].median())
    causes: list[dict[str, Any]] = []
    for col, label in (("host_idle_per_iter_ns", "GPU idle while its host was late"),
                       ("compute_per_iter_ns", "GPU compute"),
                       ("comm_transfer_exposed_per_iter_ns", "exposed communication")):
        mine, theirs = int(r[col]), int(others[col].median())
        if mine - theirs > 0.5 * net:
            causes.append({"what": label, "column": col, "straggler_ns": mine, "others_median_ns": theirs,
                           "extra_ns": mine - theirs})
    causes.sort(key=lambda c: -c["extra_ns"])
    per_iter = min(causes[0]["extra_ns"], waited_per_iter) if causes else net
    # the others' step shrinks only by the time their host waited for their GPU: past that, their own
    # host work sets their pace (FSDP's ranks both launch-bound: the others' GPU waits 25 ms a step in
    # the straggler's collectives, their host 4.6 ms of it)
    hw = others["host_wait_per_iter_ns"].to_numpy() if "host_wait_per_iter_ns" in others else np.zeros(0)
    host_cap = int(np.median(hw)) if hw.size and bool((hw >= 0).all()) else None
    if host_cap is not None:
        per_iter = min(per_iter, host_cap)
    n_it = int(r["window_iterations"]) if "window_iterations" in r and int(r["window_iterations"]) > 0 \
        else int(r["iterations"])
    # never more than the waiting the others show in the window (a per-iteration excess times every
    # iteration overstates it when they wait in some iterations only: gradient accumulation, or
    # ranks whose exports chose different iteration units); without a visible cause, their idle waiting
    col = "wait_ns" if causes else "wait_exposed_ns"
    measured = int(others[col].median()) if col in others else waited
    saving = min(int(per_iter) * n_it, measured)
    s = {"rank": int(r["rank"]), "pid": int(r["pid"]), "device_id": int(r["device_id"]),
         "trace": str(r["trace"]), "arrived_last": int(r["arrived_last"]), "collectives": n_coll,
         "median_lead_ns": margin, "others_waited_ns": waited, "others_wait_per_iter_ns": waited_per_iter,
         "others_wait_exposed_per_iter_ns": waited_exposed, "own_wait_exposed_per_iter_ns": own,
         "others_measured_wait_ns": measured, "causes": causes, "iterations": n_it,
         "others_host_wait_per_iter_ns": host_cap,
         "saving_per_iter_ns": saving // max(n_it, 1), "saving_ns": saving,
         "host_idle_activity": r["host_idle_activity"] or None}
    cause = causes[0]["what"] if causes else "not visible in this trace"
    return s, (f"rank {int(r['rank'])} arrives last in {int(r['arrived_last'])} of {n_coll} collectives: the others "
               f"wait {waited_per_iter / 1e6:.2f} ms per iteration for it, {waited_exposed / 1e6:.2f} ms of it with "
               f"their GPU idle (it waits {own / 1e6:.2f} ms so); cause: {cause}")


SLOWER = 1.2  # without communication across the traces: a p50 above this many times the median is slower


def cross_stragglers(results: list[dict[str, Any]]) -> tuple[float | None, RankAnalysis | None, list[bool]]:
    """The straggler rule across several analysed exports (``--out-dir``'s summary): the median of
    their iteration time p50s, the ranks aligned on their collectives (``combine``; None unless the
    rank payloads come from two traces or more) and, per result, whether it is the straggler: the
    trace of the rank the others wait for when the ranks are aligned, else a trace whose p50 exceeds
    ``SLOWER`` x the median of the traces of the same program. ``results``: per trace its ``p50_ns``,
    ``rank_payloads`` and, where known, ``program`` (``trace.db.launched_program`` of its capture rows): without
    communication only traces of one program are ranks of one job, so a trace is compared with the
    others of its program, and a program recorded once (unrelated programs side by side) has no
    straggler. Results without ``program`` are taken as one program."""
    p50s = [r["p50_ns"] for r in results if r.get("p50_ns")]
    med = statistics.median(p50s) if p50s else None
    payloads = [p for r in results for p in (r.get("rank_payloads") or [])]
    ranks = combine(payloads) if len({p["trace"] for p in payloads}) >= 2 else None
    if ranks is None:
        by_program: dict[Any, list[int]] = {}
        for r in results:
            if r.get("p50_ns"):
                by_program.setdefault(r.get("program"), []).append(r["p50_ns"])
        med_of = {k: statistics.median(v) for k, v in by_program.items() if len(v) >= 2}
        return med, None, [bool(r.get("p50_ns") and r.get("program") in med_of
                                and r["p50_ns"] > SLOWER * med_of[r.get("program")]) for r in results]
    late = {ranks.straggler["rank"]} if ranks.straggler else set()
    late_traces = {str(ranks.ranks.loc[ranks.ranks["rank"] == k, "trace"].iloc[0]) for k in late} if late else set()
    return med, ranks, [str(r["trace"]) in late_traces for r in results]
