"""Where one iteration's time goes on the GPU: compute, exposed communication, exposed copies, idle.

Each iteration owns the time since the previous iteration of its thread completed (its **period**:
consecutive periods tile the timeline, so nothing is counted twice even when the CPU queues
iterations ahead); a sequence's first iteration owns its own start to its completion. That span is
split, on the device the iteration's process used most, into:

* ``compute_ns``: some compute kernel ran (``opclass`` role ``compute``);
* ``comm_exposed_ns``: communication ran and no compute (what overlapping it would save);
* ``copy_exposed_ns``: only copies or memsets ran;
* ``idle_ns``: nothing ran on the device.

The four add up to the span exactly. The steady-state summary is their mean per iteration.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.gpu import Busy

COLUMNS = ["index", "pid", "tid", "device_id", "span_start_ns", "span_end_ns", "span_ns", "compute_ns",
           "comm_exposed_ns", "copy_exposed_ns", "idle_ns", "warmup"]


def iteration_breakdown(ops: pd.DataFrame, table: pd.DataFrame, busy: Busy) -> pd.DataFrame:
    if len(table) == 0 or len(ops) == 0:
        return pd.DataFrame(columns=COLUMNS)
    dev_of = (ops.groupby("pid", sort=True)["device_id"].agg(lambda s: int(s.value_counts().index[0])).to_dict())
    end = table["end_ns"].to_numpy()
    start = table["start_ns"].to_numpy()
    period = table["period_ns"].to_numpy()
    span_start = np.where(period >= 0, end - period, start)
    pid = table["pid"].to_numpy()
    out = {c: np.zeros(len(table), dtype=np.int64) for c in ("compute_ns", "comm_exposed_ns", "copy_exposed_ns",
                                                              "idle_ns")}
    dev_col = np.full(len(table), -1, dtype=np.int64)
    for p in np.unique(pid):
        rows = np.flatnonzero(pid == p)
        dev = dev_of.get(int(p))
        if dev is None or dev not in busy.per_dev:
            out["idle_ns"][rows] = end[rows] - span_start[rows]
            continue
        d = busy.per_dev[dev]
        comp = d["compute"]
        both = iv.merge(np.concatenate([comp[0], d["comm"][0]]), np.concatenate([comp[1], d["comm"][1]]))
        lo, hi = span_start[rows], end[rows]
        c_all = iv.covered_between(*d["all"], lo, hi)
        c_comp = iv.covered_between(*comp, lo, hi)
        c_both = iv.covered_between(*both, lo, hi)
        out["compute_ns"][rows] = c_comp
        out["comm_exposed_ns"][rows] = c_both - c_comp
        out["copy_exposed_ns"][rows] = c_all - c_both
        out["idle_ns"][rows] = (hi - lo) - c_all
        dev_col[rows] = dev
    return pd.DataFrame({"index": table["index"].to_numpy(), "pid": pid, "tid": table["tid"].to_numpy(),
                         "device_id": dev_col, "span_start_ns": span_start, "span_end_ns": end,
                         "span_ns": end - span_start, **out, "warmup": table["warmup"].to_numpy()})


def breakdown_summary(bd: pd.DataFrame) -> dict[str, Any]:
    """Mean per steady iteration of each part, and its share of the mean span."""
    s = bd.loc[~bd["warmup"].to_numpy(dtype=bool)] if len(bd) else bd
    if len(s) == 0:
        return {}
    parts = ("compute_ns", "comm_exposed_ns", "copy_exposed_ns", "idle_ns")
    span = float(s["span_ns"].mean())
    out: dict[str, Any] = {"iterations": int(len(s)), "span_mean_ns": int(round(span))}
    for c in parts:
        m = float(s[c].mean())
        out[f"{c[:-3]}_mean_ns"] = int(round(m))
        out[f"{c[:-3]}_frac"] = round(m / span, 4) if span > 0 else 0.0
    return out


def breakdown_groups(bd: pd.DataFrame) -> list[tuple[str, dict[str, Any]]]:
    """``breakdown_summary`` per group that gets its own bar: the one sequence of iterations, or
    each process when there are several (label, summary); groups with no steady iteration left out."""
    if len(bd) == 0:
        return []
    groups = [("one iteration", bd)] if bd["pid"].nunique() == 1 else \
        [(f"pid {int(p)} (GPU {int(g['device_id'].iloc[0])})", g) for p, g in bd.groupby("pid", sort=True)]
    return [(label, s) for label, g in groups if (s := breakdown_summary(g))]
