"""Pipeline stages, and GPUs that take turns.

**A pipeline** is several processes (ranks), one device each, whose communication is mostly
point-to-point (NCCL ``SendRecv``/``Send``/``Recv`` kernels: at least half of their communication
time in the steady window). Each rank is a stage. Per stage, over the steady window divided by its
steady iterations: ``compute_ns`` (the time its device ran compute kernels, union), ``p2p_ns`` (its
point-to-point kernels' time with no compute beside them: in a pipeline this is mostly waiting for
the neighbour stage, not moving data) and ``idle_ns`` (its device idle). The **bottleneck** is the
stage with the most compute per iteration; balancing the stages would bring every stage's compute to
the mean, so the step gets faster by at most ``max - mean`` compute per iteration (the saving). With
``m`` micro-batches per step visible as a sub-step range (``iterations.levels``) and ``p`` stages the
ideal 1F1B/GPipe bubble is ``(p - 1) / (m + p - 1)`` of the step; the measured bubble of a stage is
its share of the step without compute.

**GPUs that take turns**: one process driving several devices (naive model parallelism). Over the
steady window (or the capture) ``both_share`` = the time at least two of its devices compute at once
over the time any does. When it stays low they take turns: overlapping them (micro-batch pipelining)
bring the busy span from the union of their compute down to GPipe's ``(m + p - 1) / m`` x the busiest
device's compute, for ``m = 4`` micro-batches over the ``p`` devices (a plain split of the batch,
before tuning); the saving counted is the difference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv

if TYPE_CHECKING:
    from nsysan.analyses.gpu import Busy, Window
    from nsysan.analyses.iterations import Iterations

P2P = ("SendRecv", "Send", "Recv")
P2P_MIN_SHARE = 0.5
TURNS_MAX_SHARE = 0.2  # both-at-once share below which devices of one process "take turns"
DEFAULT_MICRO = 4


@dataclass(frozen=True)
class Pipeline:
    stages: pd.DataFrame  # pid, device_id, iterations, compute_ns, p2p_ns, idle_ns, step_ns, bubble (per iteration)
    micro_batches: int | None
    ideal_bubble: float | None
    bottleneck_pid: int
    saving_per_iteration_ns: int  # max - mean compute per iteration
    iterations: int

    def to_dict(self) -> dict[str, Any]:
        return {"stages": self.stages.to_dict("records"), "micro_batches": self.micro_batches,
                "ideal_bubble": None if self.ideal_bubble is None else round(self.ideal_bubble, 4),
                "bottleneck_pid": self.bottleneck_pid, "saving_per_iteration_ns": self.saving_per_iteration_ns,
                "iterations": self.iterations}


@dataclass(frozen=True)
class Turns:
    pid: int
    devices: list[int]
    compute_ns: dict[int, int]  # per device, in the window
    union_ns: int
    both_ns: int
    window_ns: int
    iterations: int
    saving_ns: int = 0

    @property
    def both_share(self) -> float:
        return self.both_ns / self.union_ns if self.union_ns else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "devices": self.devices, "compute_ns": {str(k): v for k, v in self.compute_ns.items()},
                "union_ns": self.union_ns, "both_ns": self.both_ns, "both_share": round(self.both_share, 4),
                "iterations": self.iterations, "saving_ns": self.saving_ns}


@dataclass(frozen=True)
class Stages:
    pipeline: Pipeline | None = None
    turns: list[Turns] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"pipeline": None if self.pipeline is None else self.pipeline.to_dict(),
                "multi_gpu_processes": [t.to_dict() for t in self.turns]}


def _steady_iterations_per_pid(its: Iterations) -> dict[int, int]:
    t = its.table
    if len(t) == 0:
        return {}
    st = t.loc[~t["warmup"].to_numpy(dtype=bool)]
    return {int(p): int(n) for p, n in st.groupby("pid").size().items()}


def _micro_batches(its: Iterations) -> int | None:
    for lv in its.levels or []:
        if lv.get("role") == "sub-step" and lv.get("per_iteration_min") == lv.get("per_iteration_max") \
                and (lv.get("per_iteration_min") or 0) >= 2:
            return int(lv["per_iteration_min"])
    return None


def _clip(pair: tuple[np.ndarray, np.ndarray], lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    return iv.clip_merged(pair[0], pair[1], lo, hi)


def stages(comm: pd.DataFrame, busy: Busy | None, steady: Window, its: Iterations) -> Stages:
    """Pipeline stages (point-to-point ranks) and multi-GPU processes: from the communication ops
    (``comm.comm_ops``), the merged busy intervals (``gpu.Busy``), the steady window and the iterations."""
    return Stages(_pipeline(comm, busy, steady, its), _turns(busy, steady, its))


def _pipeline(comm: pd.DataFrame, busy_iv: Busy | None, steady: Window, iters: Iterations) -> Pipeline | None:
    if len(comm) == 0 or busy_iv is None:
        return None
    lo, hi = steady.start_ns, steady.end_ns
    c = comm.loc[(comm["end_ns"].to_numpy() > lo) & (comm["start_ns"].to_numpy() < hi)]
    if len(c) == 0 or c["pid"].nunique() < 2:
        return None
    dur = np.minimum(c["end_ns"].to_numpy(np.int64), hi) - np.maximum(c["start_ns"].to_numpy(np.int64), lo)
    p2p = np.isin(c["collective"].astype(str).to_numpy(), P2P)
    if dur.sum() <= 0 or dur[p2p].sum() < P2P_MIN_SHARE * dur.sum():
        return None
    per_pid_dev = c.groupby("pid")["device_id"].agg(lambda s: sorted(set(s.tolist())))
    if any(len(d) != 1 for d in per_pid_dev):
        return None  # a stage is one process on one device
    its = _steady_iterations_per_pid(iters)
    rows = []
    for pid, devs in per_pid_dev.items():
        dev = int(devs[0])
        n = its.get(int(pid), 0)
        if n < 2:
            return None
        b = busy_iv.per_dev.get(dev)
        if b is None:
            return None
        comp = _clip(b["compute"], lo, hi)
        allb = _clip(b["all"], lo, hi)
        mine = c.loc[(c["pid"].to_numpy() == pid) & np.isin(c["collective"].astype(str).to_numpy(), P2P)]
        ps, pe = iv.clip(mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64), lo, hi)
        ps, pe = iv.merge(ps, pe)
        p2p_alone = int(iv.total(*iv.subtract((ps, pe), comp)))
        compute = int((comp[1] - comp[0]).sum())
        busy = int((allb[1] - allb[0]).sum())
        span = hi - lo
        rows.append({"pid": int(pid), "device_id": dev, "iterations": n, "compute_ns": compute // n,
                     "p2p_ns": p2p_alone // n, "idle_ns": max(0, span - busy) // n, "step_ns": span // n,
                     "bubble": round(1 - compute / span, 4) if span else 0.0})
    df = pd.DataFrame(rows).sort_values("pid").reset_index(drop=True)
    m = _micro_batches(iters)
    p = len(df)
    ideal = (p - 1) / (m + p - 1) if m else None
    k = int(df["compute_ns"].to_numpy().argmax())
    saving = int(df["compute_ns"].max() - df["compute_ns"].mean())
    return Pipeline(df, m, ideal, int(df.loc[k, "pid"]), saving, int(df["iterations"].min()))


def _turns(busy: Busy | None, steady: Window, iters: Iterations) -> list[Turns]:
    """The processes computing on several devices, from the analysis' merged busy intervals (per process
    and device: their compute), clipped to the steady window."""
    if busy is None:
        return []
    out = []
    lo, hi = steady.start_ns, steady.end_ns
    its = _steady_iterations_per_pid(iters)
    by_pid: dict[int, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
    for (pid, dev), d in sorted(busy.per_pid_dev.items()):
        if len(d["compute"][0]):
            by_pid.setdefault(int(pid), {})[int(dev)] = _clip(d["compute"], lo, hi)
    for pid, sets in by_pid.items():
        if len(sets) < 2:
            continue
        per = {d: int((e - s).sum()) for d, (s, e) in sets.items()}
        if sum(1 for v in per.values() if v > 0) < 2:
            continue
        union = iv.total(np.concatenate([s for s, _ in sets.values()]), np.concatenate([e for _, e in sets.values()]))
        both = sum(per.values()) - union  # with two devices: exactly the time both compute
        if len(sets) > 2:  # time at least two compute at once: sweep depth >= 2
            both = _at_least_two(list(sets.values()))
        p = len([v for v in per.values() if v > 0])
        pipelined = max(per.values()) * (DEFAULT_MICRO + p - 1) / DEFAULT_MICRO  # GPipe's span of m micro-batches
        saving = int(max(0, union - pipelined))
        out.append(Turns(pid, sorted(sets), per, int(union), int(both), hi - lo, its.get(pid, 0), saving))
    return out


def _at_least_two(sets: list[tuple[np.ndarray, np.ndarray]]) -> int:
    pts = np.concatenate([np.concatenate([s, e]) for s, e in sets])
    d = np.concatenate([np.concatenate([np.ones(len(s), np.int64), -np.ones(len(e), np.int64)]) for s, e in sets])
    o = np.lexsort((d, pts))
    pts, d = pts[o], d[o]
    depth = np.cumsum(d)
    seg = np.diff(pts)
    return int(seg[depth[:-1] >= 2].sum())
