"""What a pageable host<->device copy would take from pinned memory: the one model of copy speed
that pageable-memcpy, serial-copy-compute and sync-memcpy share, so their savings compose.

**Pinned throughput**, per direction, first found of:

1. measured: the trace's own pinned copies of that direction of at least 1 MiB (bytes / time);
2. the link: ``PINNED_SHARE`` of a PCIe x16 link's raw rate for the GPU's generation (by compute
   capability: Volta/Turing Gen3, Ampere/Ada Gen4, Hopper/Blackwell Gen5). Checked on recordings:
   H200 (Gen5) pinned HtoD 55.1-55.4 GB/s in this project's seven ladder fixtures that pin
   (ladder_pinned .. ladder_profiles, 77 MB copies: 0.87 of 63 GB/s) where the same copies from
   pageable memory ran 8.5-11.3 GB/s (a 5-6x gain, not 2x); V100-SXM2 (Gen3) 11.8 GB/s in a public
   export (0.75 of 15.75). Boards on narrower links (x8, laptops) copy slower than this; integrated
   GPUs (Jetson/Orin, Thor, GB10) and NVLink-C2C superchips (GH200, GB200) have no PCIe link here;
3. else None: the caller falls back to its assumed speed-up over the pageable rate of the copies
   large enough to have one (over ``SMALL_COPY_BYTES``, ``fallback_rate``). A copy of at most 64 KiB
   is all latency: its bytes over its time is no transfer rate (188 bytes in 515 us is "0.00 GB/s"),
   so it never sets a rate, and copies all that small have none (``has_rate``).

**Per copy**: ``floor + bytes / rate``, never more than the copy took, where ``floor`` is the
shortest copy of at most 64 KiB of that direction in the trace (the per-copy latency a tiny pinned
copy still pays; 0 without one); without a rate (the trace and the GPU say nothing, and no copy is
over 64 KiB) the bytes term is left out: ``floor``, the latency.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
import pandas as pd

from nsysan.rules._base import RuleContext

LINK_BYTES_PER_S = {3: 15.75e9, 4: 31.5e9, 5: 63.0e9}  # PCIe x16 raw rate per direction, by generation
PINNED_SHARE = 0.85  # of the raw rate a large pinned copy reaches (128b/130b coding, packet overheads)
PCIE_GEN = {6: 3, 7: 3, 8: 4, 9: 5, 10: 5, 12: 5}  # by compute capability major
NO_PCIE = {(5, 3), (6, 2), (7, 2), (8, 7), (10, 1), (11, 0), (12, 1)}  # integrated (Tegra/Jetson, Thor, GB10)
NO_PCIE_NAMES = ("GH200", "GB200", "GB300", "Orin", "Jetson", "Thor", "GB10")
MIN_MEASURED_BYTES = 1 << 20
SMALL_COPY_BYTES = 64 << 10  # a copy this small is all latency: its time is the per-copy floor
ASSUMED_SPEEDUP = 2.0  # pinned over pageable when neither the trace nor the GPU tells (pageable-memcpy's default)


def link_rate(ctx: RuleContext, device_ids: Iterable[object] | None = None) -> tuple[float | None, str]:
    """Pinned throughput of the devices' PCIe link (the slowest of them), and how it was found."""
    gpus = ctx.trace.gpus
    if device_ids is not None and len(gpus):
        gpus = gpus.loc[gpus["device_id"].isin(list(device_ids))]
    if len(gpus) == 0:
        return None, ""
    rates = []
    for name, major, minor in zip(gpus["name"].astype(str), gpus["compute_major"], gpus["compute_minor"]):
        if pd.isna(major) or pd.isna(minor) or (int(major), int(minor)) in NO_PCIE \
                or any(n in name for n in NO_PCIE_NAMES):
            return None, ""
        gen = PCIE_GEN.get(int(major))
        if gen is None:
            return None, ""
        rates.append((LINK_BYTES_PER_S[gen] * PINNED_SHARE, gen))
    rate, gen = min(rates)
    return rate, f"PCIe Gen{gen} x16 pinned"


def pinned_rate(ctx: RuleContext, kind: str, device_ids: Iterable[object] | None = None) -> tuple[float | None, str]:
    """Pinned throughput (bytes/s) for copies of ``kind`` ("HtoD"/"DtoH"): measured in the trace,
    else the GPU's link, else None; with a word on where it came from."""
    m = ctx.trace.memcpy
    pinned = m.loc[(m["kind"] == kind).to_numpy() & (m["host_mem"] == "Pinned").to_numpy()
                   & (m["bytes"].to_numpy() >= MIN_MEASURED_BYTES)]
    dur = int(pinned["dur_ns"].sum())
    if dur > 0:
        return float(pinned["bytes"].sum()) / (dur / 1e9), "measured pinned"
    return link_rate(ctx, device_ids)


def latency_floor(ctx: RuleContext, kind: str) -> int:
    """The shortest small copy (at most ``SMALL_COPY_BYTES``) of ``kind`` in the trace (ns): what even
    a tiny pinned copy takes; 0 when the trace has no small copy of that kind."""
    m = ctx.trace.memcpy
    d = m["dur_ns"].to_numpy()[(m["kind"] == kind).to_numpy() & (m["bytes"].to_numpy() <= SMALL_COPY_BYTES)]
    return int(d.min()) if len(d) else 0


def has_rate(nbytes: npt.ArrayLike) -> bool:
    """Whether copies of these sizes have a transfer rate worth printing or dividing by: at least one
    is over ``SMALL_COPY_BYTES`` (smaller ones are all latency)."""
    return bool((np.asarray(nbytes, dtype=np.float64) > SMALL_COPY_BYTES).any())


def fallback_rate(nbytes: npt.ArrayLike, dur_ns: npt.ArrayLike, assumed_speedup: float) -> float | None:
    """``assumed_speedup`` x the aggregate throughput (bytes/s) of the copies over ``SMALL_COPY_BYTES``
    (what a pinned copy would reach when neither the trace nor the GPU says); None when no copy is
    that large or they took no time."""
    b = np.asarray(nbytes, dtype=np.float64)
    d = np.asarray(dur_ns, dtype=np.float64)
    big = b > SMALL_COPY_BYTES
    t = float(d[big].sum())
    if not big.any() or t <= 0:
        return None
    return float(b[big].sum()) / (t / 1e9) * assumed_speedup


def pinned_durations(ctx: RuleContext, copies: pd.DataFrame, assumed_speedup: float) -> np.ndarray:
    """Per copy (rows with kind, host_mem, bytes, dur_ns, device_id), the time it would take from
    pinned memory: pageable host<->device copies at ``pinned_rate`` (or ``fallback_rate`` when the
    trace and the GPU say nothing) plus the latency floor, capped at what they took; the floor alone
    when there is no rate (all of them 64 KiB or less: latency, no rate to divide by); every other
    copy as it ran."""
    dur = copies["dur_ns"].to_numpy().astype(np.int64)
    out = dur.copy()
    kind = copies["kind"].astype(str).to_numpy()
    pageable = (copies["host_mem"].astype(str) == "Pageable").to_numpy()
    nbytes = copies["bytes"].to_numpy().astype(np.float64)
    for k in ("HtoD", "DtoH"):
        sel = pageable & (kind == k)
        if not sel.any():
            continue
        rate, _ = pinned_rate(ctx, k, np.unique(copies["device_id"].to_numpy()[sel]))
        if rate is None:
            rate = fallback_rate(nbytes[sel], dur[sel], assumed_speedup)
        if rate is not None and rate <= 0:
            continue
        est = latency_floor(ctx, k) + (nbytes[sel] / rate * 1e9 if rate is not None else 0.0 * nbytes[sel])
        out[sel] = np.minimum(dur[sel], est.astype(np.int64))
    return out
