"""Iterations of a repeated NVTX range, warm-up detection and the steady-state window.

The iteration range is ``--iteration-range NAME`` or, by default, the push/pop range name that repeats
most often (at least 3 times; ties go to the larger total time). Per iteration:

* ``cpu_ns``: the range's CPU duration;
* ``gpu_proj_ns``: first to last GPU op launched inside it (see ``nvtx.ranges``);
* ``latency_ns``: range start -> max(range end, projected GPU end): what the iteration really took.

Warm-up: the leading iterations whose latency exceeds ``warmup_factor`` x the median of the rest
(at most half of them). Steady state = the remaining iterations; its window runs from the first
steady iteration's start to the last one's end (GPU included). Statistics (mean, std, p50/p90/p99,
throughput = iterations per second of steady-state wall time) cover the steady state only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from nsysan.analyses.gpu import Window


@dataclass(frozen=True)
class Iterations:
    range_name: str | None
    how: str  # "option", "most frequent", "none"
    table: pd.DataFrame  # one row per iteration
    warmup: int
    steady: Window | None
    stats: dict[str, float | int] = field(default_factory=dict)
    timed_regions: list[dict[str, object]] = field(default_factory=list)


def pick_range(rg: pd.DataFrame, name: str | None) -> tuple[str | None, str]:
    if name is not None:
        return name, "option"
    pp = rg.loc[rg["style"] == "PushPop"]
    if len(pp) == 0:
        pp = rg
    counts = pp.groupby("name").agg(n=("dur_ns", "size"), tot=("dur_ns", "sum")).reset_index()
    counts = counts.loc[counts["n"] >= 3]
    if len(counts) == 0:
        return None, "none"
    best = counts.sort_values(["n", "tot", "name"], ascending=[False, False, True], kind="stable").iloc[0]
    return str(best["name"]), "most frequent"


def _stats(lat: np.ndarray, span_ns: int) -> dict[str, float | int]:
    if lat.size == 0:
        return {"count": 0}
    p50, p90, p99 = np.percentile(lat, [50, 90, 99])
    return {
        "count": int(lat.size), "mean_ns": int(round(float(lat.mean()))),
        "std_ns": int(round(float(lat.std(ddof=1)))) if lat.size > 1 else 0,
        "min_ns": int(lat.min()), "max_ns": int(lat.max()),
        "p50_ns": int(round(float(p50))), "p90_ns": int(round(float(p90))), "p99_ns": int(round(float(p99))),
        "throughput_per_s": round(lat.size / (span_ns / 1e9), 3) if span_ns > 0 else 0.0,
    }


def iterations(rg: pd.DataFrame, *, name: str | None = None, warmup_factor: float = 1.5) -> Iterations:
    timed = rg.loc[rg["name"].str.contains("Total Elapsed Time", regex=False)]
    regions = [{"name": str(r["name"]), "start_ns": int(r["start_ns"]), "end_ns": int(r["end_ns"]),
                "cpu_ns": int(r["dur_ns"]),
                "with_gpu_ns": int(max(r["end_ns"], r["proj_end_ns"]) - r["start_ns"])} for _, r in timed.iterrows()]
    chosen, how = pick_range(rg, name)
    if chosen is None:
        return Iterations(None, how, pd.DataFrame(), 0, None, {}, regions)
    it = rg.loc[rg["name"] == chosen].sort_values("start_ns", kind="stable").reset_index(drop=True)
    if len(it) == 0:
        return Iterations(chosen, how, pd.DataFrame(), 0, None, {"count": 0}, regions)
    gpu_end = np.where(it["gpu_ops"] > 0, it["proj_end_ns"], it["end_ns"])
    end = np.maximum(it["end_ns"].to_numpy(), gpu_end)
    table = pd.DataFrame({
        "index": np.arange(len(it)), "pid": it["pid"], "tid": it["tid"], "start_ns": it["start_ns"],
        "end_ns": end, "cpu_ns": it["dur_ns"], "gpu_proj_ns": it["proj_ns"], "gpu_ops": it["gpu_ops"],
        "latency_ns": end - it["start_ns"].to_numpy(),
        "gpu_after_end_ns": it["gpu_after_end_ns"],
    })
    lat = table["latency_ns"].to_numpy()
    warm = 0
    limit = len(lat) // 2
    while warm < limit:
        rest = np.median(lat[warm + 1:]) if warm + 1 < len(lat) else lat[warm]
        if lat[warm] > warmup_factor * rest:
            warm += 1
        else:
            break
    table = table.assign(warmup=table["index"] < warm)
    steady = table.loc[~table["warmup"]]
    win = Window(int(steady["start_ns"].min()), int(steady["end_ns"].max()), "steady state") if len(steady) else None
    stats = _stats(steady["latency_ns"].to_numpy(), win.dur_ns if win else 0)
    stats["warmup_count"] = warm
    if warm:
        stats["warmup_mean_ns"] = int(round(float(table.loc[table["warmup"], "latency_ns"].mean())))
    return Iterations(chosen, how, table, warm, win, stats, regions)
