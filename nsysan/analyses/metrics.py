"""How hard the GPU works while busy: GPU metric means per device, per NVTX range, per iteration and
per kernel group (``trace/metrics.py`` reads the samples).

**Means.** A sample at time ``t`` describes the sampling period after it, ``[t, t + period)``
(measured on ``waits_phases``, nsys 2025.3, H200: at the start of a 1.4 ms GEMM the sample 75 us
before it reads 18% tensor active, the one 25 us after it 97%). For a set of time intervals (the
instances of a range, merged; one iteration; the kernels of a group, merged), a metric's value is the
mean of the samples whose period lies inside one of the intervals (``start <= t`` and
``t + period <= end``), on the device's own metric source: a sample that also saw other work is
not counted. ``samples`` says how many there were; ``coverage`` = samples x period / the intervals'
total duration (at most 1): the share of the interval the samples stand for (a range partly
outside the metric capture, or kernels shorter than the period, have little or none). A mean over
fewer than ``MIN_SAMPLES`` samples is shown with its count but not judged.

**Intervals.** A user range (the program's own closed push/pop ranges; library ranges left out,
``libranges``) is judged on the GPU: each instance spans its GPU work (first to last GPU op launched
inside it, ``nvtx.ranges``' projection) when it launched any, else its CPU span. An iteration spans
its start to its completion (``iterations``). Kernel groups are judged in the steady window, per
device: the roles (``opclass``: compute, communication, copies per direction, memsets), the GEMM /
convolution kernels (``MATMUL``, the names ``fp32-compute`` calls heavy), the ``TOP_KERNELS``
kernels with the most time, and per user range its kernels (kind ``range``, ``range_kernels``: the
kernels launched inside one of its instances, on its thread: what the range asked the GPU to do,
without the gaps between them that its span holds); ``measured_ns`` is the part of a group's busy
time that holds samples (runs of its ops at least one sampling period long): the rules judge and
claim only that part.

**Verdicts** (thresholds in % of peak; several can hold):

* ``tensor-bound``: tensor active >= 40;
* ``memory-bound``: DRAM read + write >= ``DRAM_NEAR_PEAK`` (60) with tensor active < 10;
* ``PCIe-bound``: PCIe RX or TX >= ``PCIE_NEAR_PEAK`` (60) (RX is host-to-device: 90% during the
  HtoD copies of ``metrics_mix``, TX 91% during its DtoH copies);
* ``tensor cores idle`` (GEMM/convolution kernel groups only): tensor active < 5 while SMs active
  >= 50 (FP32 GEMMs on the CUDA cores);
* ``SMs mostly idle``: GR active >= 5 (the GPU has work) but SMs active < 0.4 x GR active (few
  blocks, tiny kernels, low occupancy: the SMs are used less than half the time the GPU is busy);
* ``GPU idle much of the time``: GR active < 50 (not said of PCIe-bound rows: copies run on the copy
  engines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import group_rows
from nsysan.analyses.gpu import Window
from nsysan.analyses.libranges import library_of
from nsysan.trace.metrics import Metrics

MIN_SAMPLES = 20
TOP_KERNELS = 10
DRAM_NEAR_PEAK = 60.0
PCIE_NEAR_PEAK = 60.0
TENSOR_BOUND = 40.0
TENSOR_IDLE = 5.0
SM_IDLE_RATIO = 0.4
SHOWN = ("gr_active", "sm_active", "sm_issue", "tensor_active", "warps_in_flight", "dram_read", "dram_write",
         "pcie_rx", "pcie_tx", "nvlink_rx", "nvlink_tx")
# GEMM / convolution kernels (the same names fp32-compute calls heavy)
MATMUL = re.compile(r"conv|gemm|xmma|fprop|dgrad|wgrad|cutlass|implicit|winograd|cudnn::cnn|sm\d+_|nvjet|matmul", re.IGNORECASE)
MATMUL_GROUP = "GEMM/convolution kernels"


class _Source:
    """A metric source with prefix sums: the mean over any set of intervals in two searches."""

    def __init__(self, src: Any) -> None:
        self.src = src
        self.ts = src.ts
        self.period = src.period_ns
        self.sum: dict[str, np.ndarray] = {}
        self.cnt: dict[str, np.ndarray] = {}
        for k, v in src.values.items():
            ok = ~np.isnan(v)
            self.sum[k] = np.concatenate([[0.0], np.cumsum(np.where(ok, v, 0).astype(np.float64))])
            self.cnt[k] = np.concatenate([[0], np.cumsum(ok, dtype=np.int64)])

    def _bounds(self, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The samples whose window [t, t + period) lies inside [s, e): positions [lo, hi)."""
        lo = np.searchsorted(self.ts, s, side="left")
        hi = np.maximum(np.searchsorted(self.ts, e - self.period, side="right"), lo)
        return lo, hi

    def each(self, s: np.ndarray, e: np.ndarray) -> dict[str, np.ndarray]:
        """Per interval: samples and the mean of each metric (NaN without samples)."""
        lo, hi = self._bounds(np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64))
        out: dict[str, np.ndarray] = {"samples": (hi - lo).astype(np.int64)}
        for k in SHOWN:
            if k not in self.sum:
                continue
            n = self.cnt[k][hi] - self.cnt[k][lo]
            with np.errstate(invalid="ignore", divide="ignore"):
                out[k] = np.where(n > 0, (self.sum[k][hi] - self.sum[k][lo]) / np.maximum(n, 1), np.nan)
        return out

    def measured(self, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The merged intervals that hold at least one sample (the rest were not measured: shorter
        than the sampling period, or outside the metric capture)."""
        s, e = iv.merge(np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64))
        lo, hi = self._bounds(s, e)
        keep = hi > lo
        return s[keep], e[keep]

    def union(self, s: np.ndarray, e: np.ndarray) -> dict[str, Any]:
        """Over the union of the intervals: samples, coverage and each metric's mean (None: no samples)."""
        s, e = iv.merge(np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64))
        lo, hi = self._bounds(s, e)
        n_all = int((hi - lo).sum())
        dur = int((e - s).sum())
        out: dict[str, Any] = {"samples": n_all,
                               "coverage": round(min(1.0, n_all * self.period / dur), 3) if dur > 0 else None}
        for k in SHOWN:
            if k not in self.sum:
                out[k] = None
                continue
            n = int((self.cnt[k][hi] - self.cnt[k][lo]).sum())
            out[k] = round(float((self.sum[k][hi] - self.sum[k][lo]).sum()) / n, 2) if n else None
        return out


@dataclass
class GpuMetrics:
    devices: pd.DataFrame  # one row per metric source: device, how it was mapped, period, samples, metrics
    by_range: pd.DataFrame  # per device and user range (and the steady window)
    by_iteration: pd.DataFrame  # per device and iteration
    by_kernel: pd.DataFrame  # per device and kernel group, in the steady window
    note: str = ""
    sources: list[Any] = field(default_factory=list, repr=False)  # trace.metrics.Source, for the timeline lane
    _pre: dict[int, _Source] = field(default_factory=dict, repr=False)
    # (device, kind, group) -> its ops' (start, end), clipped to the steady window (the rules' claims)
    group_spans: dict[tuple[int, str, str], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.by_range)

    def source_of(self, device_id: int | None) -> _Source | None:
        """The metric source of ``device_id`` (None: not sampled)."""
        for i, s in enumerate(self.sources):
            if s.device_id == device_id:
                if i not in self._pre:
                    self._pre[i] = _Source(s)
                return self._pre[i]
        return None

    def measured(self, device_id: int | None, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Of the union of the intervals, the parts the samples measured (``_Source.measured``)."""
        src = self.source_of(device_id)
        if src is None:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return src.measured(np.asarray(s), np.asarray(e))

    def means(self, device_id: int | None, s: np.ndarray, e: np.ndarray) -> dict[str, Any] | None:
        """Samples, coverage and metric means over the union of intervals on one device's source."""
        src = self.source_of(device_id)
        return None if src is None else src.union(np.asarray(s), np.asarray(e))


def verdicts(r: dict[str, Any], matmul: bool = False) -> list[str]:
    """The verdicts a row's means support (module docstring); none under ``MIN_SAMPLES`` samples.
    ``matmul``: the row is GEMM/convolution kernels (``tensor cores idle`` is judged only there)."""
    if (r.get("samples") or 0) < MIN_SAMPLES:
        return []
    g = {k: (None if r.get(k) is None or r.get(k) != r.get(k) else r.get(k)) for k in SHOWN}  # NaN: not sampled
    out = []
    t, dr, dw, gr, sm = g["tensor_active"], g["dram_read"], g["dram_write"], g["gr_active"], g["sm_active"]
    if t is not None and t >= TENSOR_BOUND:
        out.append("tensor-bound")
    if dr is not None and dw is not None and dr + dw >= DRAM_NEAR_PEAK and (t is None or t < 10):
        out.append("memory-bound")
    pcie = [v for v in (g["pcie_rx"], g["pcie_tx"]) if v is not None]
    copying = bool(pcie) and max(pcie) >= PCIE_NEAR_PEAK
    if copying:
        out.append("PCIe-bound")
    if matmul and t is not None and sm is not None and t < TENSOR_IDLE and sm >= 50:
        out.append("tensor cores idle")
    if gr is not None and sm is not None and gr >= 5 and sm < SM_IDLE_RATIO * gr:
        out.append("SMs mostly idle")
    if gr is not None and gr < 50 and not copying:  # copies run on the copy engines, not the SMs
        out.append("GPU idle much of the time")
    return out


def verdict(r: dict[str, Any]) -> str:
    return "; ".join(verdicts(r, matmul=is_matmul_row(r)))


def is_matmul_row(r: dict[str, Any]) -> bool:
    """A kernel-group row of GEMM/convolution kernels (the class, or one kernel of it)."""
    return (r.get("kind") == "class" and r.get("group") == MATMUL_GROUP) or \
        (r.get("kind") == "kernel" and bool(MATMUL.search(str(r.get("group", "")))))


def _devices(sources: list[Any]) -> pd.DataFrame:
    rows = []
    for i, s in enumerate(sources):
        rows.append({"source": i, "type_id": int(s.type_id), "device_id": s.device_id, "device": s.label,
                     "name": s.device_name, "mapped_by": s.mapped_by or "not identified",
                     "period_ns": s.period_ns, "samples": int(len(s.ts)),
                     "start_ns": int(s.ts[0]) if len(s.ts) else None, "end_ns": int(s.ts[-1]) if len(s.ts) else None,
                     "metrics": {k: s.names[k] for k in SHOWN if k in s.names}})
    return pd.DataFrame(rows)


def range_intervals(g: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each instance's GPU span (its projection) when it launched GPU work, else its CPU span (int64
    throughout: no float on the way)."""
    s = g["start_ns"].to_numpy(np.int64)
    e = g["end_ns"].to_numpy(np.int64)
    if "proj_start_ns" in g and "proj_end_ns" in g:
        ps = pd.array(g["proj_start_ns"], dtype="Int64")
        pe = pd.array(g["proj_end_ns"], dtype="Int64")
        has = np.asarray(~ps.isna() & ~pe.isna(), dtype=bool)
        psv, pev = ps.to_numpy(dtype=np.int64, na_value=0), pe.to_numpy(dtype=np.int64, na_value=0)
        has &= pev > psv
        s = np.where(has, psv, s)
        e = np.where(has, pev, e)
    return s, e


def user_ranges(ranges: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The program's own closed ranges, by name (library ranges left out)."""
    rg = ranges
    if len(rg) == 0:
        return []
    rg = rg.loc[rg["end_ns"].notna().to_numpy() & (rg["end_ns"].to_numpy() > rg["start_ns"].to_numpy())]
    out = []
    for name, g in rg.groupby(rg["name"].astype(str), sort=True):
        if library_of(name, str(g["domain"].iloc[0]) if "domain" in g and pd.notna(g["domain"].iloc[0]) else ""):
            continue
        out.append((name, g))
    return out


def kernel_groups(ops: pd.DataFrame, device: int, lo: int, hi: int) -> list[tuple[str, str, np.ndarray]]:
    """(kind, group, mask over ``ops``) for one device in [lo, hi): roles, copies per direction,
    GEMM/convolution kernels and the top kernels by time."""
    if len(ops) == 0:
        return []
    on = (ops["device_id"].to_numpy() == device) & (ops["start_ns"].to_numpy() < hi) & (ops["end_ns"].to_numpy() > lo)
    if not on.any():
        return []
    out: list[tuple[str, str, np.ndarray]] = []

    def eq(col: str, v: str) -> np.ndarray:  # on the categorical's codes: no string per op
        return np.asarray(ops[col] == v, dtype=bool)

    role_compute = eq("role", "compute")
    for r in ("compute", "communication", "memset"):
        m = on & (role_compute if r == "compute" else eq("role", r))
        if m.any():
            out.append(("role", r, m))
    copy = on & eq("op", "memcpy")
    if copy.any():  # copies are few: their direction as text
        idx = np.flatnonzero(copy)
        ks = np.array([str(x) for x in ops["kind"].to_numpy()[idx]], dtype=object)
        for k in sorted(set(ks.tolist())):
            m = np.zeros(len(ops), dtype=bool)
            m[idx[ks == k]] = True
            out.append(("role", f"memcpy {k}", m))
    names = ops["name"]
    kern = on & eq("op", "kernel")
    if kern.any():
        cat = names.array if isinstance(names.array, pd.Categorical) else pd.Categorical(names.astype(str))
        codes = np.asarray(cat.codes)
        heavy_cat = np.array([bool(MATMUL.search(str(c))) for c in cat.categories], dtype=bool)
        heavy = np.where(codes >= 0, heavy_cat[np.maximum(codes, 0)] if len(heavy_cat) else False, False)
        m = kern & heavy & role_compute
        if m.any():
            out.append(("class", MATMUL_GROUP, m))
        dur = ops["dur_ns"].to_numpy(np.int64)
        tot = np.bincount(codes[kern & (codes >= 0)], weights=dur[kern & (codes >= 0)], minlength=len(cat.categories))
        for c in np.argsort(-tot, kind="stable")[:TOP_KERNELS]:
            if tot[c] <= 0:
                break
            out.append(("kernel", str(cat.categories[c]), kern & (codes == c)))
    return out


Launches = dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]


def kernel_launches(ops: pd.DataFrame, device: int, lo: int, hi: int) -> Launches:
    """The kernels on ``device`` that overlap [lo, hi), per launching thread (pid, tid): their launching
    calls' starts, ascending, and their positions in ``ops`` (for ``range_kernels``; grouped once)."""
    if len(ops) == 0:
        return {}
    on = ((ops["device_id"].to_numpy() == device) & (ops["start_ns"].to_numpy() < hi)
          & (ops["end_ns"].to_numpy() > lo) & np.asarray(ops["op"] == "kernel", dtype=bool))
    idx = np.flatnonzero(on)
    if len(idx) == 0:
        return {}
    api = ops["api_start_ns"].to_numpy(np.int64)[idx]
    out = {}
    for (p, t), rows in group_rows(ops["pid"].to_numpy()[idx], ops["tid"].to_numpy()[idx]):
        order = rows[np.argsort(api[rows], kind="stable")]
        out[(p, t)] = (api[order], idx[order].astype(np.int64))
    return out


def range_kernels(launches: Launches, g: pd.DataFrame) -> np.ndarray:
    """Positions in ``ops`` (ascending) of a range's kernels: of ``kernel_launches``, those whose
    launching call started inside one of the range's instances ``g`` (closed NVTX ranges of one name:
    pid, tid, start_ns, end_ns), on the instance's own thread, its start and end included (the
    launches ``nvtx.ranges``' projection counts)."""
    if not launches or len(g) == 0:
        return np.empty(0, np.int64)
    gap_pid, gap_tid = g["pid"].to_numpy(np.int64), g["tid"].to_numpy(np.int64)
    gs, ge = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
    parts = []
    for (p, t), rows in group_rows(gap_pid, gap_tid):
        got = launches.get((p, t))
        if got is None:
            continue
        api, pos = got
        s, e = iv.merge(gs[rows], ge[rows])  # instances nested in one another count once
        a, b = np.searchsorted(api, s, side="left"), np.searchsorted(api, e, side="right")
        parts += [pos[x:y] for x, y in zip(a.tolist(), b.tolist()) if y > x]
    return np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64)


def _group_rows(out: GpuMetrics, pre: _Source, head: dict[str, Any], ops: pd.DataFrame,
                ranges_by_name: list[tuple[str, pd.DataFrame]], device: int, steady: Any) -> list[dict[str, Any]]:
    """The ``by_kernel`` rows of one device in the steady window (kernel groups, then each user
    range's kernels), their clipped spans kept in ``out.group_spans``."""
    lo, hi = steady.start_ns, steady.end_ns
    st, en = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    groups: list[tuple[str, str, np.ndarray]] = [(k, grp, np.flatnonzero(m)) for k, grp, m in
                                                 kernel_groups(ops, device, lo, hi)]
    launches = kernel_launches(ops, device, lo, hi) if ranges_by_name else {}
    groups += [("range", name, p) for name, g in ranges_by_name if len(p := range_kernels(launches, g))]
    rows = []
    for kind, group, pos in groups:
        a, b = iv.clip(st[pos], en[pos], lo, hi)
        out.group_spans[(device, kind, group)] = (a, b)
        rows.append({**head, "kind": kind, "group": group, "ops": len(pos),
                     "busy_ns": iv.total(*iv.merge(a, b)), "measured_ns": iv.total(*pre.measured(a, b)),
                     **pre.union(a, b)})
    return rows


def analyze_metrics(metrics: Metrics | None, ranges: pd.DataFrame, steady: Window,
                    iterations: pd.DataFrame | None = None, ops: pd.DataFrame | None = None) -> GpuMetrics | None:
    """Per device: the steady window and each user range (``by_range``), each iteration
    (``by_iteration``), each kernel group of the steady window (``by_kernel``); None without samples."""
    if metrics is None or not metrics.sources:
        return None
    shown = list(SHOWN)
    out = GpuMetrics(devices=_devices(metrics.sources), by_range=pd.DataFrame(), by_iteration=pd.DataFrame(),
                     by_kernel=pd.DataFrame(), note=metrics.note, sources=list(metrics.sources))
    ranges_by_name = user_ranges(ranges)
    rrows, irows, krows = [], [], []
    for i, s in enumerate(metrics.sources):
        pre = _Source(s)
        out._pre[i] = pre
        head = {"source": i, "device_id": s.device_id, "device": s.label}
        rrows.append({**head, "range": f"[{steady.label}]", "instances": 1,
                      **pre.union(np.array([steady.start_ns]), np.array([steady.end_ns]))})
        for name, g in ranges_by_name:
            a, b = range_intervals(g)
            rrows.append({**head, "range": name, "instances": int(len(g)), **pre.union(a, b)})
        if iterations is not None and len(iterations):
            it = iterations
            each = pre.each(it["start_ns"].to_numpy(np.int64), it["end_ns"].to_numpy(np.int64))
            dur = (it["end_ns"].to_numpy(np.int64) - it["start_ns"].to_numpy(np.int64)).astype(np.float64)
            for j in range(len(it)):
                row = {**head, "pid": int(it["pid"].iloc[j]), "tid": int(it["tid"].iloc[j]),
                       "iteration": int(it["index"].iloc[j]) if "index" in it else j,
                       "start_ns": int(it["start_ns"].iloc[j]), "end_ns": int(it["end_ns"].iloc[j]),
                       "warmup": bool(it["warmup"].iloc[j]) if "warmup" in it else False,
                       "samples": int(each["samples"][j]),
                       "coverage": round(min(1.0, each["samples"][j] * pre.period / dur[j]), 3) if dur[j] > 0 else None}
                for k in shown:
                    v = each.get(k)
                    row[k] = None if v is None or np.isnan(v[j]) else round(float(v[j]), 2)
                irows.append(row)
        if ops is not None and s.device_id is not None:
            krows += _group_rows(out, pre, head, ops, ranges_by_name, int(s.device_id), steady)
    rcols = ["source", "device_id", "device", "range", "instances", "samples", "coverage", *shown, "verdict"]
    br = pd.DataFrame(rrows)
    br["verdict"] = [verdict(r) for r in br.to_dict("records")]
    out.by_range = br[rcols].sort_values(["source", "samples"], ascending=[True, False], kind="stable").reset_index(drop=True)
    icols = ["source", "device_id", "device", "pid", "tid", "iteration", "start_ns", "end_ns", "warmup", "samples",
             "coverage", *shown]
    out.by_iteration = pd.DataFrame(irows, columns=icols)
    kcols = ["source", "device_id", "device", "kind", "group", "ops", "busy_ns", "measured_ns", "samples", "coverage", *shown, "verdict"]
    bk = pd.DataFrame(krows, columns=kcols[:-1])
    bk["verdict"] = [verdict(r) for r in bk.to_dict("records")] if len(bk) else []
    out.by_kernel = bk[kcols]
    return out
