"""What one rank's payload measures beside its per-iteration means (``ranks``): the time its host
waited for its GPU, its communication with no compute beside it, and a timeline lane of its device;
and each table's rows of each process, found once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import group_rows, name_in
from nsysan.analyses.gaps import BLOCKING_SYNC_APIS

if TYPE_CHECKING:
    from nsysan.analyses.gpu import Busy

HOST_WAIT_MIN_NS = 100_000  # a CUDA call this long blocks the host (a full launch queue, a wait)
SYNC_COPIES = ("cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemset", "cuMemcpy", "cuMemcpyDtoH",
               "cuMemcpyHtoD", "cuMemcpyDtoD")


def pid_rows(df: pd.DataFrame) -> Callable[[int], np.ndarray]:
    """A function: process id -> the positions of ``df``'s rows of that process, in their order
    (empty without any); the rows grouped once."""
    if len(df) == 0 or "pid" not in df:
        return lambda pid: np.zeros(0, dtype=np.int64)
    groups = dict(group_rows(df["pid"].to_numpy()))
    empty = np.zeros(0, dtype=np.int64)
    return lambda pid: groups.get((int(pid),), empty)


def only_columns(df: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """``df`` with those of ``columns`` it has, and ``pid`` (a new frame of the same arrays: no copy)."""
    keep = [c for c in ("pid", *columns) if c in df.columns]
    return df[keep] if len(keep) < len(df.columns) else df


def rows_by_pid(*frames: pd.DataFrame) -> list[tuple[pd.DataFrame, Callable[[int], np.ndarray]]]:
    """Each frame with its ``pid_rows``."""
    return [(f, pid_rows(f)) for f in frames]


def blocking_calls(api: pd.DataFrame) -> np.ndarray:
    """Per row of the CUDA API table ``api``: whether it is a synchronization call or a synchronous
    copy or memset (``host_wait``'s names; decided once per name, for every rank at once)."""
    return name_in(api["name"], (*BLOCKING_SYNC_APIS, *SYNC_COPIES)) if len(api) else np.zeros(0, dtype=bool)


def host_wait(api: pd.DataFrame, rows: np.ndarray, lo: int, hi: int, blocking: np.ndarray) -> int:
    """The time one process's threads (``rows``: its rows of the CUDA API table ``api``) spent blocked in CUDA
    calls in [lo, hi): synchronization calls, synchronous copies and memsets, and any call of at least
    ``HOST_WAIT_MIN_NS`` (a full launch queue), clipped. What a rank's host waited for its GPU: the
    most its step can shrink when its GPU stops waiting for a straggler (the rest of its step is its
    own host work). -1 when none of its CUDA calls is traced in the window (its host is not known: no
    bound). ``blocking``: ``blocking_calls(api)``, decided once for every rank of the table."""
    if len(api) == 0 or len(rows) == 0:
        return -1
    st, en = api["start_ns"].to_numpy()[rows], api["end_ns"].to_numpy()[rows]
    keep = (st < hi) & (en > lo)
    rows = rows[keep]
    if rows.size == 0:  # no CUDA call of this rank traced in the window: its host is not known
        return -1
    s, e = np.maximum(st[keep], lo), np.minimum(en[keep], hi)
    sel = blocking[rows] | ((e - s) >= HOST_WAIT_MIN_NS)
    return int((e[sel] - s[sel]).sum())


LANE_ITERATIONS = 2
LANE_MAX = 4000


def timeline_lane(busy: Busy | None, dev: int, bd: pd.DataFrame) -> dict[str, Any]:
    """What one rank's device ``dev`` ran (``busy``) over ``LANE_ITERATIONS`` iterations in the middle of
    its steady state (merged intervals per role, on the trace's clock; `ranks._shifted` moves them to the common
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
        out[role] = np.stack([rs[:LANE_MAX], re_[:LANE_MAX]], axis=1).astype(np.int64).tolist()  # [[start, end]...]
    return out


def exposed_comm(busy: Busy | None, dev: int, cm: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The parts of this rank's communication kernels during which no compute ran on its device (``busy``)."""
    s = cm["start_ns"].to_numpy(dtype=np.int64)
    e = cm["end_ns"].to_numpy(dtype=np.int64)
    d = busy.per_dev.get(dev) if busy is not None else None
    if d is None or len(s) == 0:
        return iv.merge(s, e)
    return iv.subtract(iv.merge(s, e), d["compute"])
