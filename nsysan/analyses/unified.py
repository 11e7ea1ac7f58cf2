"""Unified (managed) memory: migrations, page faults, and the kernel time spent while faults are pending.

**Migrations** are the memcpy rows of the unified kinds (``copy_kind`` 11 host to device, 12 device
to host) with their ``migration_cause`` (1 user prefetch, 2 page fault, 3 speculative prefetch,
4 eviction, 5 access counters); they are in every trace of a program using managed memory.
**Faults** need ``--cuda-um-gpu-page-faults=true --cuda-um-cpu-page-faults=true``: GPU fault groups
(start, end, device, number of faults) and CPU faults (one row each, a point in time).

Per steady iteration (its period: previous completion, completion], per process: GPU faults, CPU
faults, bytes moved each way and by cause; per kernel name: the kernel time during which GPU faults
of its device were pending (kernel intervals intersected with the union of the fault groups).
**Thrashing**: the driver moves memory both ways on its own (page faults, speculative prefetch,
eviction: every cause but a user prefetch) in at least half of the steady iterations.

**Saving model**: the fix (prefetching to where the memory is used next, ``cudaMemPrefetchAsync``,
or explicit device buffers) turns fault-driven migrations into bulk transfers. The time it saves is
the kernel time spent while faults are pending, less the time the same bytes take at bulk rate: the
trace's own user-prefetch migrations' rate when it has them, else its fastest migration row's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.iterations import steady_periods

if TYPE_CHECKING:
    from nsysan.analyses.gpu import Window
    from nsysan.analyses.iterations import Iterations
    from nsysan.trace.model import Trace

UM_HTOD, UM_DTOH = 11, 12
CAUSES = {0: "unknown", 1: "user prefetch", 2: "page fault", 3: "speculative prefetch", 4: "eviction",
          5: "access counters"}
FLAGS = ("--cuda-um-gpu-page-faults=true", "--cuda-um-cpu-page-faults=true")
THRASH_SHARE = 0.5


@dataclass(frozen=True)
class UnifiedMemory:
    migrations: int
    bytes_htod: int
    bytes_dtoh: int
    by_cause: dict[str, dict[str, int]]  # cause -> {"count", "bytes", "ns"}
    gpu_fault_groups: int
    gpu_faults: int
    cpu_faults: int
    faults_recorded: bool
    per_iteration: pd.DataFrame  # index, pid, gpu_faults, cpu_faults, bytes_htod, bytes_dtoh, faulted_kernel_ns
    per_kernel: pd.DataFrame  # name, count, total_ns, faulted_ns
    thrashing: bool
    bulk_rate_bytes_per_s: float
    fault_bytes: int  # bytes moved by page-fault migrations in the steady window
    saving_ns: int  # in the steady window
    steady_iterations: int
    missing: list[str] = field(default_factory=list)
    # the steady window's kernel time while GPU faults were pending: merged (starts, ends)
    faulted: tuple[np.ndarray, np.ndarray] = (np.empty(0, np.int64), np.empty(0, np.int64))

    @property
    def present(self) -> bool:
        return self.migrations > 0 or self.gpu_fault_groups > 0 or self.cpu_faults > 0

    def to_dict(self) -> dict[str, Any]:
        return {"migrations": self.migrations, "bytes_htod": self.bytes_htod, "bytes_dtoh": self.bytes_dtoh,
                "by_cause": self.by_cause, "gpu_fault_groups": self.gpu_fault_groups, "gpu_faults": self.gpu_faults,
                "cpu_faults": self.cpu_faults, "faults_recorded": self.faults_recorded,
                "per_iteration": self.per_iteration.to_dict("records"),
                "per_kernel": self.per_kernel.head(20).to_dict("records"), "thrashing": self.thrashing,
                "bulk_rate_bytes_per_s": round(self.bulk_rate_bytes_per_s, 1), "fault_bytes": self.fault_bytes,
                "saving_ns": self.saving_ns, "missing_flags": self.missing}


def _bounds(table: pd.DataFrame) -> pd.DataFrame:
    """Steady iterations of the iteration table ``table`` with their period (lo, hi] per process."""
    st = steady_periods(table)
    if len(st) == 0:
        return pd.DataFrame(columns=["index", "pid", "lo", "hi"])
    return pd.DataFrame({"index": st["index"].to_numpy(), "pid": st["pid"].to_numpy(), "lo": st["lo_ns"].to_numpy(),
                         "hi": st["hi_ns"].to_numpy()})


def _per_iteration(um: pd.DataFrame, gf: pd.DataFrame, cf: pd.DataFrame, b: pd.DataFrame,
                   cause: np.ndarray) -> tuple[pd.DataFrame, bool]:
    """Faults and migrated bytes per steady iteration (``b``: its bounds per process), and whether
    most iterations thrash (the driver moving data both ways on its own)."""
    per = pd.DataFrame(columns=["index", "pid", "gpu_faults", "cpu_faults", "bytes_htod", "bytes_dtoh"])
    kind = um["copy_kind"].to_numpy()
    od = cause != 1
    if len(b):
        st, nbytes = um["start_ns"].to_numpy(np.int64), um["bytes"].to_numpy(np.int64)
        rows = []
        for pid, g in b.groupby("pid"):
            l_, h_ = g["lo"].to_numpy(np.int64), g["hi"].to_numpy(np.int64)
            mp = um["pid"].to_numpy() == pid

            def moved(m: np.ndarray, mp: np.ndarray = mp, l_: np.ndarray = l_, h_: np.ndarray = h_) -> np.ndarray:
                """Bytes of the process's migrations ``m`` per iteration."""
                return iv.sums_between(st[mp & m], l_, h_, nbytes[mp & m])

            gm = gf["pid"].to_numpy() == pid if len(gf) else np.zeros(0, bool)
            cm = cf["pid"].to_numpy() == pid if len(cf) else np.zeros(0, bool)
            rows.append(pd.DataFrame({
                "index": g["index"].to_numpy(), "pid": int(pid),
                "gpu_faults": iv.sums_between(gf["start_ns"].to_numpy(np.int64)[gm], l_, h_,
                                              gf["faults"].to_numpy(np.int64)[gm]) if len(gf) else 0,
                "cpu_faults": iv.sums_between(cf["start_ns"].to_numpy(np.int64)[cm], l_, h_) if len(cf) else 0,
                "bytes_htod": moved(kind == UM_HTOD), "bytes_dtoh": moved(kind == UM_DTOH),
                # moved by the driver on its own (faults, speculation, eviction), not by a prefetch
                "_on_demand_htod": moved(od & (kind == UM_HTOD)), "_on_demand_dtoh": moved(od & (kind == UM_DTOH))}))
        per = pd.concat(rows, ignore_index=True)
    thrash = bool(len(per) and ((per["_on_demand_htod"] > 0) & (per["_on_demand_dtoh"] > 0)).mean() >= THRASH_SHARE)
    return per.drop(columns=["_on_demand_htod", "_on_demand_dtoh"], errors="ignore"), thrash


def _faulted_kernels(k: pd.DataFrame, gf: pd.DataFrame, lo: int,
                     hi: int) -> tuple[pd.DataFrame, tuple[np.ndarray, np.ndarray], int]:
    """Kernel time while GPU faults are pending, per kernel name, in the steady window [lo, hi):
    the table, the faulted intervals (merged over the devices) and their total."""
    pk = pd.DataFrame(columns=["name", "count", "total_ns", "faulted_ns"])
    if not (len(gf) and len(k)):
        return pk, (np.empty(0, np.int64), np.empty(0, np.int64)), 0
    kin = (k["end_ns"].to_numpy() > lo) & (k["start_ns"].to_numpy() < hi)
    kk = k.loc[kin]
    faulted = np.zeros(len(kk), dtype=np.int64)
    pieces: list[tuple[np.ndarray, np.ndarray]] = []
    for d in np.unique(gf["device_id"].to_numpy()).tolist():
        fm = gf["device_id"].to_numpy() == d
        ms, me = iv.merge(gf["start_ns"].to_numpy(np.int64)[fm], gf["end_ns"].to_numpy(np.int64)[fm])
        km = kk["device_id"].to_numpy() == d
        s = np.maximum(kk["start_ns"].to_numpy(np.int64)[km], lo)
        e = np.minimum(kk["end_ns"].to_numpy(np.int64)[km], hi)
        faulted[km] = iv.covered_between(ms, me, s, e)
        pieces.append(iv.intersect((ms, me), iv.merge(s, e)))
    faulted_iv = iv.merge(np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces]))
    agg = pd.DataFrame({"name": kk["name"].astype(str).to_numpy(), "total_ns": kk["dur_ns"].to_numpy(np.int64),
                        "faulted_ns": faulted}).groupby("name").agg(count=("total_ns", "size"),
                                                                    total_ns=("total_ns", "sum"),
                                                                    faulted_ns=("faulted_ns", "sum"))
    pk = agg.reset_index().sort_values("faulted_ns", ascending=False).reset_index(drop=True)
    return pk, faulted_iv, int(pk["faulted_ns"].sum())


def _bulk_rate(dur: np.ndarray, byt: np.ndarray, cause: np.ndarray) -> float:
    """Bytes a second of a bulk migration: the user's prefetches, else the fastest migration row."""
    pre = cause == 1
    if pre.any() and dur[pre].sum() > 0:
        return float(byt[pre].sum()) / (dur[pre].sum() / 1e9)
    if len(dur) and (dur > 0).any():
        return float(np.max(byt[dur > 0] / (dur[dur > 0] / 1e9)))
    return 0.0


def unified_memory(trace: Trace, iterations: Iterations, steady: Window) -> UnifiedMemory:
    """Unified memory of ``trace`` (its migrations and page faults), per steady iteration of
    ``iterations`` and in the steady window ``steady``."""
    mc = trace.memcpy
    um = mc.loc[np.isin(mc["copy_kind"].to_numpy(), (UM_HTOD, UM_DTOH))] if len(mc) else mc
    cause = um["migration_cause"].to_numpy() if "migration_cause" in um else np.zeros(len(um), dtype=np.int64)
    gf, cf = trace.um_gpu_faults, trace.um_cpu_faults
    by: dict[str, dict[str, int]] = {}
    for c in np.unique(cause).tolist():
        m = cause == c
        name = CAUSES.get(int(c), f"unknown ({int(c)})")  # a cause no nsys writes: named by its number
        by[name] = {"count": int(m.sum()), "bytes": int(um["bytes"].to_numpy(np.int64)[m].sum()),
                    "ns": int(um["dur_ns"].to_numpy(np.int64)[m].sum())}
    kind = um["copy_kind"].to_numpy()
    lo, hi = steady.start_ns, steady.end_ns
    b = _bounds(iterations.table)
    per, thrash = _per_iteration(um, gf, cf, b, cause)
    pk, faulted_iv, faulted_total = _faulted_kernels(trace.kernels, gf, lo, hi)
    byt = um["bytes"].to_numpy(np.int64)
    rate = _bulk_rate(um["dur_ns"].to_numpy(np.int64), byt, cause)
    stw = (um["start_ns"].to_numpy(np.int64) >= lo) & (um["start_ns"].to_numpy(np.int64) < hi)
    fault_bytes = int(byt[stw & (cause == 2)].sum())
    bulk_ns = int(fault_bytes / rate * 1e9) if rate > 0 else 0
    saving = max(0, faulted_total - bulk_ns)
    recorded = len(gf) > 0 or len(cf) > 0
    missing = [] if recorded else list(FLAGS)
    return UnifiedMemory(len(um), int(byt[kind == UM_HTOD].sum()), int(byt[kind == UM_DTOH].sum()), by,
                         len(gf), int(gf["faults"].sum()) if len(gf) else 0, len(cf), recorded, per, pk, thrash, rate,
                         fault_bytes, saving, len(b), missing if len(um) else [], faulted_iv)


@dataclass(frozen=True)
class CpuFaultCost:
    """What a CPU page fault on managed memory costs the thread that takes it, from one NVTX range's
    instances with and without faults (``cpu_fault_cost``). Times in ns."""

    range_name: str
    per_fault_ns: int  # the faulting instances' time beyond the fault-free median, per fault
    clean: int  # instances with no CPU fault inside
    clean_ns: int  # their median time: the range's own work
    faulting: int  # instances with CPU faults inside
    faulting_ns: int  # their median time
    faults: int  # the CPU faults inside the faulting instances


def cpu_fault_cost(trace: Trace, name: str, threads: Iterable[tuple[int, int]]) -> CpuFaultCost | None:
    """The cost of one CPU page fault on managed memory inside NVTX range ``name`` on ``threads``
    ((pid, tid) pairs), over the whole capture: the range's instances whose process took no CPU fault
    inside them (``um_cpu_faults``, ``--cuda-um-cpu-page-faults=true``; a fault is a point in time,
    without a duration) give the range's own work, their median time ``clean_ns``; each faulting
    instance's time beyond it is the faults' service (the driver unmapping the pages on the GPU,
    migrating them, mapping them on the host, while the thread waits), and the cost of a fault is that
    excess summed (each instance at least 0) over the faults inside them. None when no instance is
    fault-free or none faulted: the range's own work and its faults' service cannot be told apart.
    Caveats: the faults are those of the process (CPU faults carry no thread), and a fault-free
    instance is taken to do the same work as a faulting one (a first instance before the GPU touched
    the memory, typically a warm-up)."""
    cf = trace.um_cpu_faults
    nv = trace.nvtx
    if len(cf) == 0 or len(nv) == 0:
        return None
    keys = [(int(p) << 32) | int(t) for p, t in threads]
    m = (nv["name"].astype(str).to_numpy() == name) & nv["end_ns"].notna().to_numpy()
    m &= np.isin((nv["pid"].to_numpy(np.int64) << 32) | nv["tid"].to_numpy(np.int64), keys)
    if not m.any():
        return None
    st = nv["start_ns"].to_numpy(np.int64)[m]
    en = nv["end_ns"].to_numpy()[m].astype(np.int64)
    pid = nv["pid"].to_numpy()[m]
    n = np.zeros(len(st), np.int64)
    for p in np.unique(pid).tolist():
        t = np.sort(cf["start_ns"].to_numpy(np.int64)[cf["pid"].to_numpy() == p])
        k = pid == p
        n[k] = np.searchsorted(t, en[k], side="left") - np.searchsorted(t, st[k], side="left")
    d = en - st
    clean, hit = n == 0, n > 0
    if not clean.any() or not hit.any():
        return None
    base = int(np.median(d[clean]))
    per = int(np.maximum(d[hit] - base, 0).sum() // n[hit].sum())
    return CpuFaultCost(name, per, int(clean.sum()), base, int(hit.sum()), int(np.median(d[hit])), int(n[hit].sum()))
