"""Plausibility limits: rows with values no recording holds are set aside with a warning that counts
them (times beyond +-2^62 ns, ops longer than the capture allows, byte and fault counts out of
range, frees of memory a process did not hold), absurd GPU properties read as unknown, and a trace
whose sums would wrap refused as damaged."""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsysan.errors import CorruptTraceError
from nsysan.trace.model import INTERVAL_TABLES, TIME_LIMIT

# Values no recording holds: such rows are set aside with a warning that counts them.
MAX_BYTES = 1 << 48  # 256 TiB: more than any copy, set or allocation of any GPU
SUM_LIMIT = 1 << 62  # the durations (and the bytes) of a whole trace must add up below this
# an op may outlast the capture (an OS runtime call still blocked when it stopped: 4x the session on
# a public export), never by this factor, nor beyond the floor on a short capture
SPAN_FACTOR = 1_000
SPAN_FLOOR = 3_600 * 10 ** 9
# GPU properties: 0 is how nsys writes "not reported" (an integrated or non-NVIDIA GPU)
GPU_LIMITS = {"sm_count": (0, 10_000), "total_memory_bytes": (0, MAX_BYTES),
              "memory_bandwidth_bytes_per_s": (0, MAX_BYTES), "clock_rate_hz": (0, 1 << 40),
              "compute_major": (0, 1_000), "compute_minor": (0, 1_000)}
BOUNDS_NOTE = (f"times within +-2^62 ns, no op longer than {SPAN_FACTOR:,}x the capture's span (and 1 hour), "
               f"byte counts in 0..2^48, SM counts in 0..{GPU_LIMITS['sm_count'][1]:,} (0: not reported)")


def _implausible(frames: dict[str, pd.DataFrame], session: tuple[int, int] | None, warnings: list[str]) -> None:
    """Rows with values no recording holds, set aside (in place, with a warning that counts them):
    an event time beyond +-``TIME_LIMIT``; an op longer than ``SPAN_FACTOR`` x the capture's span
    (the session's duration, or the extent of the events' starts if longer) and ``SPAN_FLOOR``; a
    copy, set or allocation of a negative or over ``MAX_BYTES`` bytes. An absurd GPU property (an SM
    count over 10,000 or negative) becomes missing. The durations and the bytes of what is left must add up below
    ``SUM_LIMIT`` (so no sum of them can wrap), else the trace is refused as damaged. Vectorised:
    two comparisons a column on a sound trace."""
    timed = [n for n in (*INTERVAL_TABLES, "nvtx") if len(frames[n])]
    dropped: dict[str, int] = {}

    def drop(name: str, bad: np.ndarray) -> None:
        if bad.any():
            dropped[name] = dropped.get(name, 0) + int(bad.sum())
            frames[name] = frames[name].loc[~bad].reset_index(drop=True)

    def ends(df: pd.DataFrame) -> np.ndarray:
        e = df["end_ns"]
        return e.to_numpy(dtype=np.int64, na_value=0) if isinstance(e.dtype, pd.api.extensions.ExtensionDtype) \
            else e.to_numpy()

    for name in timed:
        df = frames[name]
        st, en = df["start_ns"].to_numpy(), ends(df)
        # (a sound trace: four comparisons of min/max, no temporary of the table's length)
        if len(st) and -TIME_LIMIT < int(st.min()) and int(st.max()) < TIME_LIMIT \
                and -TIME_LIMIT < int(en.min()) and int(en.max()) < TIME_LIMIT:
            continue
        drop(name, (st <= -TIME_LIMIT) | (st >= TIME_LIMIT) | (en <= -TIME_LIMIT) | (en >= TIME_LIMIT))
    timed = [n for n in timed if len(frames[n])]
    if timed:
        starts = [frames[n]["start_ns"].to_numpy() for n in timed]
        # the capture's span: the session's when it is sound (the starts' extent is no measure then: a
        # range that starts days early would widen it), else the extent of the events' starts
        if session is not None and 0 < session[1] - session[0] < TIME_LIMIT:
            span = session[1] - session[0]
        else:
            span = max(int(s.max()) for s in starts) - min(int(s.min()) for s in starts)
        span = max(SPAN_FACTOR * span, SPAN_FLOOR)
        for name in timed:
            d = frames[name]["dur_ns"]
            dur = d.to_numpy(dtype=np.int64, na_value=0) if isinstance(d.dtype, pd.api.extensions.ExtensionDtype) \
                else d.to_numpy()
            if len(dur) and int(dur.max()) > span:
                drop(name, dur > span)
    for name in ("memcpy", "memset", "gpu_memory_usage"):
        df = frames[name]
        if len(df) and "bytes" in df:
            b = df["bytes"].to_numpy()
            if int(b.min()) < 0 or int(b.max()) > MAX_BYTES:
                drop(name, (b < 0) | (b > MAX_BYTES))
    _fault_rows(frames, warnings)
    gpus = frames["gpus"]
    unset = []
    for col, (lo, hi) in GPU_LIMITS.items():
        if col in gpus and len(gpus):
            v = gpus[col]
            bad = (v.notna() & ((v < lo) | (v > hi))).to_numpy(dtype=bool, na_value=False)
            if bad.any():
                gpus = gpus.assign(**{col: v.mask(bad)})
                unset.append(f"{col} of {int(bad.sum())} GPU(s)")
    frames["gpus"] = gpus
    if dropped:
        warnings.append("set aside as damaged (" + BOUNDS_NOTE + "): " +
                        ", ".join(f"{name} {k:,} row(s)" for name, k in dropped.items()))
    if unset:
        warnings.append("GPU properties out of range (" + BOUNDS_NOTE + ") read as unknown: " + ", ".join(unset))
    _check_sums(frames, timed)
    _memory_frees(frames, warnings)


MAX_FAULTS = 1 << 32  # page faults in one fault row (one page's faults in one group): more is damage


def _check_sums(frames: dict[str, pd.DataFrame], timed: list[str]) -> None:
    """``CorruptTraceError`` when the durations of the ``timed`` tables, the byte counts (copies, sets,
    memory usage events) or the GPU page faults add up to ``SUM_LIMIT`` or more."""
    def fsum(col: pd.Series) -> float:  # in float64, chunk by chunk (no float copy of the column)
        v = col.to_numpy(dtype=np.int64, na_value=0) if isinstance(col.dtype, pd.api.extensions.ExtensionDtype) \
            else col.to_numpy()
        return float(np.add.reduce(v, dtype=np.float64))

    total = sum(fsum(frames[n]["dur_ns"]) for n in timed if len(frames[n]))
    total_bytes = sum(fsum(frames[n]["bytes"]) for n in ("memcpy", "memset", "gpu_memory_usage")
                      if len(frames[n]) and "bytes" in frames[n])
    faults = fsum(frames["um_gpu_faults"]["faults"]) if "faults" in frames.get("um_gpu_faults", ()) else 0.0
    if total >= SUM_LIMIT or total_bytes >= SUM_LIMIT or faults >= SUM_LIMIT:
        what = "durations" if total >= SUM_LIMIT else "byte counts" if total_bytes >= SUM_LIMIT else "page faults"
        raise CorruptTraceError(f"the events' {what} add up to {max(total, total_bytes, faults):.3g}, beyond 2^62: "
                                "the trace is damaged (no recording holds that much)")


def _fault_rows(frames: dict[str, pd.DataFrame], warnings: list[str]) -> None:
    """GPU page fault rows that end before they start or count faults beyond 0..``MAX_FAULTS``, set
    aside with a warning that counts them."""
    gf = frames.get("um_gpu_faults")
    if gf is not None and len(gf) and "faults" in gf and "end_ns" in gf:
        n, st, en = gf["faults"].to_numpy(), gf["start_ns"].to_numpy(), gf["end_ns"].to_numpy()
        bad = (n < 0) | (n > MAX_FAULTS) | (en < st)
        if bad.any():
            frames["um_gpu_faults"] = gf.loc[~bad].reset_index(drop=True)
            warnings.append(f"GPU page fault rows set aside as damaged (fault counts in 0..2^32, none ending "
                            f"before it starts): {int(bad.sum()):,} row(s)")


def _memory_frees(frames: dict[str, pd.DataFrame], warnings: list[str]) -> None:
    """Frees of device memory a process did not hold then (``_overdrawn_frees``), set aside with a
    warning that counts them (after the byte sums are known to be below 2^62: no sum here wraps)."""
    gm = frames.get("gpu_memory_usage")
    if gm is not None and len(gm) and {"operation", "bytes", "mem_kind", "pid", "device_id"} <= set(gm.columns):
        bad = _overdrawn_frees(gm)
        if bad.any():
            frames["gpu_memory_usage"] = gm.loc[~bad].reset_index(drop=True)
            warnings.append(f"device memory: {int(bad.sum()):,} free(s) of memory the process did not hold then "
                            "(no allocation before, a second free, more bytes than it held) set aside: live "
                            "memory never goes below 0")


def _overdrawn_frees(gm: pd.DataFrame) -> np.ndarray:
    """Per (device, process), in time order: the frees of device memory (not host kinds) that would
    take live memory (allocations - frees, the frees kept so far) below 0. A sound trace costs one
    cumulative sum per pair; a pair whose sum goes negative is walked row by row from there. The
    signed bytes are made per pair, in its time order (no signed copy of the whole table beside it)."""
    bad = np.zeros(len(gm), dtype=bool)
    op, b = gm["operation"].to_numpy(), gm["bytes"].to_numpy(np.int64)
    device = ~np.isin(gm["mem_kind"].to_numpy(), (0, 1))  # analyses.memory.HOST_KINDS
    if not (device & (op == 1) & (b != 0)).any():  # no free takes anything
        return bad
    for idx in _process_rows(gm):
        s = _signed_bytes(b, op, device, idx)
        np.cumsum(s, out=s)
        if int(s.min()) >= 0:
            continue
        first = int(np.argmax(s < 0))
        live = int(s[first - 1]) if first else 0
        del s
        idx = np.arange(len(b)) if idx is None else idx
        for j, x in zip(idx[first:].tolist(), _signed_bytes(b, op, device, idx[first:]).tolist()):
            if live + x < 0:
                bad[j] = True
            else:
                live += x
    return bad


def _signed_bytes(b: np.ndarray, op: np.ndarray, device: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
    """Rows ``idx`` (None: all) of the memory usage events as + bytes for a device allocation, - bytes
    for a device free, 0 else (a new int64 array)."""
    s = b.copy() if idx is None else b[idx]
    o, d = (op, device) if idx is None else (op[idx], device[idx])
    s[~(d & ((o == 0) | (o == 1)))] = 0
    np.negative(s, out=s, where=d & (o == 1))
    return s


def _process_rows(gm: pd.DataFrame) -> list[np.ndarray | None]:
    """The rows of each (device, process) of the memory usage events, in that order, each in time
    order (ties: the table's order); None for all the rows in the table's order (one pair whose
    rows are in time order already: no index of the whole table)."""
    dev, pid, st = gm["device_id"].to_numpy(), gm["pid"].to_numpy(), gm["start_ns"].to_numpy()
    if int(dev.min()) == int(dev.max()) and int(pid.min()) == int(pid.max()):
        return [None] if bool((st[1:] >= st[:-1]).all()) else [np.argsort(st, kind="stable")]
    order = np.lexsort((st, pid, dev))  # stable: ties keep the table's order
    ds, ps = dev[order], pid[order]
    cuts = np.flatnonzero((ds[1:] != ds[:-1]) | (ps[1:] != ps[:-1])) + 1
    return np.split(order, cuts)
