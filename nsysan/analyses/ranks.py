"""Ranks: several processes (one per GPU, as torchrun starts them), aligned on their iterations and
collectives, with the waiting split from the transfer and the straggler named with its cause.

**Ranks.** Every process that ran communication kernels is a rank; ranks are numbered in the order
of their export's file name (numbers as numbers: ``rank2`` before ``rank10``), then (device, pid).
One export holding every rank (``nsys profile`` of ``torchrun``) or one export per rank
(``cross_rank`` on per-file tables) give the same result.

**Waiting that costs time.** A rank waits inside a collective while its compute may still run
beside it (DDP's first buckets start during backward). The wait that costs the step is the part with
no compute on the rank's device: ``exposed_wait_ns`` (the wait intervals minus the device's compute).
A rank's exposed communication splits into that waiting and the rest (``comm_exposed_transfer``):
only the latter is what overlapping communication with compute could hide.

**Per rank** (means per steady iteration of that rank): period, compute, exposed transfer, exposed
waiting, exposed copies and idle (from ``breakdown``: they add up to the iteration's span), the
communication kernel time, and the GPU idle while the rank's host was late (host-bound gaps, with
what its thread was doing).

Where each part lives: ``rank_alignment`` (**alignment**, **waiting vs transfer**), ``rank_straggler``
(the **straggler** and its cause), ``rank_measures`` (host waiting, exposed communication, timeline
lanes); this module makes each rank's payload and combines them.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import name_in
from nsysan.analyses.rank_alignment import align
from nsysan.analyses.rank_measures import (
    blocking_calls,
    exposed_comm,
    host_wait,
    only_columns,
    pid_rows,
    rows_by_pid,
    timeline_lane,
)
from nsysan.analyses.rank_straggler import P2P, find_straggler

if TYPE_CHECKING:
    from nsysan.analyses.gpu import Busy, Window
    from nsysan.analyses.iterations import Iterations
    from nsysan.trace.model import Trace


@dataclass(frozen=True)
class RankAnalysis:
    ranks: pd.DataFrame  # one row per rank
    aligned: pd.DataFrame  # one row per (collective, k, rank)
    not_aligned: list[str] = field(default_factory=list)
    straggler: dict[str, Any] | None = None
    verdict: str = ""
    # rank -> a timeline lane (see rank_measures.timeline_lane)
    lanes: dict[int, dict[str, Any]] = field(default_factory=dict)
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
    # with ranks x rows: 64 ranks, 7.9 s), and of the frames taken by rank only the columns read below
    (comm_f, comm_r), (table_f, table_r), (bd_f, bd_r), (gaps_f, gaps_r) = rows_by_pid(
        only_columns(comm, "start_ns", "end_ns", "dur_ns", "exposed_ns", "collective"),
        only_columns(table, "warmup", "period_ns", "start_ns", "end_ns"),
        only_columns(a.breakdown, "warmup", "span_start_ns", "span_end_ns",
                     *(f"{c}_ns" for c in ("span", "compute", "comm_exposed", "copy_exposed", "idle"))),
        only_columns(a.gaps, "cause", "start_ns", "end_ns", "gap_ns", "activity"))
    ops_r, api_rows = pid_rows(a.ops), pid_rows(a.cuda_api)
    # what every rank asks of the same tables, decided once for all their rows (64 ranks: a mask
    # each over its own rows of the ops' roles and the gaps' causes cost more than their measures)
    op_st, op_en = a.ops["start_ns"].to_numpy(), a.ops["end_ns"].to_numpy()
    computes = name_in(a.ops["role"], ("compute",)) if len(a.ops) else np.zeros(0, dtype=bool)
    c_st = comm["start_ns"].to_numpy()
    g_host = name_in(a.gaps["cause"], ("host", "sync")) if len(a.gaps) else np.zeros(0, dtype=bool)
    g_st, g_en = (a.gaps[c].to_numpy() if len(a.gaps) else np.zeros(0, np.int64) for c in ("start_ns", "end_ns"))
    blocking = blocking_calls(a.cuda_api)
    out = []
    for pid, dev in zip(procs["pid"].astype(int), procs["device_id"].astype(int)):
        table_p, bd_p = table_f.iloc[table_r(pid)], bd_f.iloc[bd_r(pid)]
        it = table_p.loc[~table_p["warmup"].to_numpy(dtype=bool)] if len(table) else table
        n = max(len(it), 1)
        per = it["period_ns"].to_numpy() if len(it) else np.zeros(0)
        per = per[per >= 0]
        lo = int(it["start_ns"].min()) if len(it) else a.steady.start_ns
        hi = int(it["end_ns"].max()) if len(it) else a.steady.end_ns
        r = ops_r(pid)
        r = r[(op_st[r] < hi) & (op_en[r] > lo) & computes[r]]
        compute_ns = iv.total(*iv.clip(op_st[r], op_en[r], lo, hi))
        r = comm_r(pid)
        every = comm_f.iloc[r]  # aligned over the whole capture, then clipped
        cm = comm_f.iloc[r[(c_st[r] >= lo) & (c_st[r] < hi)]]
        exp_s, exp_e = exposed_comm(a.busy, dev, cm)
        bd = a.breakdown
        bd = bd_p.loc[~bd_p["warmup"].to_numpy(dtype=bool)] if len(bd) else bd
        parts = {f"{c}_per_iter_ns": int(round(float(bd[f"{c}_ns"].mean()))) if len(bd) else 0
                 for c in ("span", "compute", "comm_exposed", "copy_exposed", "idle")}
        r = gaps_r(pid)
        host = gaps_f.iloc[r[g_host[r] & (g_st[r] >= lo) & (g_en[r] <= hi)]] if len(a.gaps) else a.gaps
        top = _top_activity(host)
        out.append({
            "trace": "", "pid": int(pid), "device_id": int(dev), "iterations": int(len(it)),
            "period_p50_ns": int(np.median(per)) if per.size else None,
            "compute_per_iter_ns": int(compute_ns / n), "comm_per_iter_ns": int(cm["dur_ns"].sum() / n),
            "comm_exposed_per_iter_ns": int(cm["exposed_ns"].sum() / n), "breakdown": parts,
            "host_idle_per_iter_ns": int(host["gap_ns"].sum() / n) if len(host) else 0,
            "host_wait_per_iter_ns": max(-1, host_wait(a.cuda_api, api_rows(pid), lo, hi, blocking) // n),
            "host_idle_activity": top, "window": [lo, hi],
            "iteration_end_ns": it["end_ns"].to_numpy(dtype=np.int64) if len(it) else np.zeros(0, np.int64),
            "comm": {"start_ns": every["start_ns"].to_numpy(), "end_ns": every["end_ns"].to_numpy(),
                     "collective": every["collective"].astype(str).tolist()},
            "comm_exposed": {"start_ns": exp_s, "end_ns": exp_e}, "lanes": timeline_lane(a.busy, dev, bd)})
    return out


def _top_activity(host: pd.DataFrame) -> str:
    """The activity of the most host-caused idle time among the gaps ``host`` ("" without any)."""
    if not len(host) or "activity" not in host:
        return ""
    col = host["activity"].array
    if isinstance(col, pd.Categorical):  # a sum per name code: the one largest, unless names tie for it
        codes = np.asarray(col.codes)
        seen = codes >= 0
        sums = np.bincount(codes[seen], weights=host["gap_ns"].to_numpy()[seen], minlength=len(col.categories))
        best = np.flatnonzero(sums == sums.max()) if seen.any() else np.zeros(0, np.int64)
        if len(best) == 1:
            return str(col.categories[best[0]])
    act = host.groupby("activity", sort=True)["gap_ns"].sum().sort_values(ascending=False)
    return str(act.index[0]) if len(act) else ""


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
    straggler, verdict = find_straggler(ranks, aligned, iter_ns, skipped)
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


SLOWER = 1.2  # without communication across the traces: a p50 above this many times the median is slower


def cross_stragglers(results: list[dict[str, Any]]) -> tuple[float | None, RankAnalysis | None, list[bool]]:
    """The straggler rule across several analysed exports (``--out-dir``'s summary): the median of
    their iteration time p50s, the ranks aligned on their collectives (``combine``; None unless the
    rank payloads come from two traces or more) and, per result, whether it is the straggler: the
    trace of the rank the others wait for when the ranks are aligned, else a trace whose p50 exceeds
    ``SLOWER`` x the median of the traces of the same program. ``results``: per trace its ``p50_ns``,
    ``rank_payloads`` and, where known, ``program`` (``trace.launched_program.launched_program`` of its capture rows): without
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
