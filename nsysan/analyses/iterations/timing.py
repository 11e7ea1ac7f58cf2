"""Per-iteration timing: period, latency, queue depth, service time, warm-up, the statistics and the
per-thread sequences (``iterations/__init__``: Period vs latency)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.iterations.values import IterationStats

QUEUEING_RATIO = 1.2
WARMUP_CHAIN = 3  # fast iterations that may lie between two slow ones of an inferred warm-up


def steady_periods(table: pd.DataFrame) -> pd.DataFrame:
    """The steady iterations that have a period, each with the interval it owns: ``lo_ns`` (the
    previous completion) and ``hi_ns`` (its completion = start + latency), (lo, hi]. Per thread the
    intervals tile the time between its completions: what happened in one is that iteration's."""
    if len(table) == 0:
        return table.assign(lo_ns=pd.Series(dtype="int64"), hi_ns=pd.Series(dtype="int64"))
    st = table.loc[~table["warmup"].to_numpy(dtype=bool) & (table["period_ns"].to_numpy() >= 0)]
    hi = st["start_ns"].to_numpy(np.int64) + st["latency_ns"].to_numpy(np.int64)
    return st.assign(lo_ns=hi - st["period_ns"].to_numpy(np.int64), hi_ns=hi)


def _stats(values: np.ndarray, prefix: str) -> dict[str, int]:
    if values.size == 0:
        return {}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {f"{prefix}mean_ns": int(round(float(values.mean()))),
            f"{prefix}std_ns": int(round(float(values.std(ddof=1)))) if values.size > 1 else 0,
            f"{prefix}min_ns": int(values.min()), f"{prefix}max_ns": int(values.max()),
            f"{prefix}p50_ns": int(round(float(p50))), f"{prefix}p90_ns": int(round(float(p90))),
            f"{prefix}p99_ns": int(round(float(p99)))}


def _sequence_columns(it: pd.DataFrame, warmup_factor: float, lead: float = 0.0) -> pd.DataFrame:
    """period, queue depth, service time and warm-up of one (pid, tid) sequence sorted by start. With
    ``lead`` > 0 (iterations inferred from the GPU work, where the loop's own warm-up steps outside any
    range are iterations too), the warm-up runs on over slow iterations in the leading ``lead`` share
    of the sequence that follow it within ``WARMUP_CHAIN`` fast ones (set-up work that alternates
    with quick steps: an autotuner's trials, a first pass of each shape), not only to the first fast
    one; a slow iteration further on is a slow step (a group's first checkpoint), as it is in an
    annotated loop."""
    start = it["start_ns"].to_numpy()
    done = it["end_ns"].to_numpy()
    n = len(it)
    period = np.full(n, -1, dtype=np.int64)
    prev_done = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(done)[:-1]])
    # since the latest earlier completion: never negative (an iteration whose work completed before
    # an earlier one's has period 0), and the periods add up to the sequence's completions' span
    period[1:] = np.maximum(done[1:] - prev_done[1:], 0)
    service = np.maximum(done - np.maximum(start, prev_done), 0)
    depth = np.searchsorted(start, done, side="left") - (np.arange(n) + 1)
    depth = np.maximum(depth, 0)
    warm = 0
    limit = n // 2
    while warm < limit:
        rest = np.median(service[warm + 1:]) if warm + 1 < n else service[warm]
        if service[warm] > warmup_factor * rest:
            warm += 1
        else:
            break
    if lead > 0 and n > 2:
        head = int(n * lead)
        slow = np.flatnonzero(service[:head] > warmup_factor * np.median(service))
        for k in slow.tolist():  # slow ones a few fast ones apart continue the warm-up; a later one is a step
            if k <= warm + WARMUP_CHAIN:
                warm = max(warm, min(k + 1, limit))
    return it.assign(period_ns=period, queue_depth=depth.astype(np.int64), service_ns=service,
                     warmup=np.arange(n) < warm)


def _helper_thread_work(it: pd.DataFrame, owned: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray]:
    """Per instance: the latest end and the number of GPU ops launched during it by threads of its
    process that run no instance of the range (-1 / 0 where none)."""
    n = len(it)
    end = np.full(n, -1, dtype=np.int64)
    count = np.zeros(n, dtype=np.int64)
    if owned is None or len(owned) == 0 or n == 0:
        return end, count
    seq = set(zip(it["pid"].tolist(), it["tid"].tolist()))
    opid, otid = owned["pid"].to_numpy(), owned["tid"].to_numpy()
    ipid = it["pid"].to_numpy()
    for pid in sorted(set(ipid.tolist())):
        helper = (opid == pid) & ~np.isin(otid, [t for p, t in seq if p == pid])
        if not helper.any():
            continue
        api = owned["api_start_ns"].to_numpy()[helper]
        o_end = owned["end_ns"].to_numpy()[helper]
        order = np.argsort(api, kind="stable")
        api, o_end = api[order], o_end[order]
        rows = np.flatnonzero(ipid == pid)
        lo = np.searchsorted(api, it["start_ns"].to_numpy()[rows], side="left")
        hi = np.searchsorted(api, it["end_ns"].to_numpy()[rows], side="right")
        has = hi > lo
        count[rows] = hi - lo
        if has.any():
            _, mx = iv.min_max_over(o_end, o_end, lo[has], hi[has])
            end[rows[has]] = mx
    return end, count


def _iteration_stats(table: pd.DataFrame, steady: pd.DataFrame, sequences: int, enclosing: int,
                     warm: int) -> IterationStats:
    """The iteration model's statistics: count, period, latency, the headline figure, throughput,
    queue depth, warm-up."""
    lat = steady["latency_ns"].to_numpy()
    per = steady["period_ns"].to_numpy()
    per = per[per >= 0]
    stats: dict[str, Any] = {"count": int(len(steady)), "sequences": int(sequences)}
    if per.size and np.median(per) == 0:
        # most instances complete before an earlier one does (overlapping instances, or damaged
        # rows): a period p50 of 0 ns says nothing about the loop, so the latency is the figure
        stats["overlapping_instances"] = int(np.count_nonzero(per == 0))
        per = per[:0]
    if enclosing:
        stats["enclosing_instances"] = enclosing
    stats.update(_stats(per, "period_"))
    stats.update(_stats(lat, "latency_"))
    headline = per if per.size else lat
    stats.update(_stats(headline, ""))
    stats["headline"] = "period" if per.size else "latency"
    stats["throughput_per_s"] = round(1e9 / float(headline.mean()), 3) if headline.size and headline.mean() > 0 else 0.0
    depth = steady["queue_depth"].to_numpy()
    stats["queue_depth_p50"] = float(np.median(depth)) if depth.size else 0.0
    stats["queue_depth_max"] = int(depth.max()) if depth.size else 0
    stats["latency_includes_queueing"] = bool(
        per.size and depth.size and np.median(depth) >= 1
        and stats["latency_p50_ns"] >= QUEUEING_RATIO * stats["period_p50_ns"])
    stats["warmup_count"] = warm
    if warm:
        wt = table.loc[table["warmup"]]
        stats["warmup_mean_ns"] = int(round(float(wt["latency_ns"].mean())))
        stats["warmup_service_ns"] = int(wt["service_ns"].sum())
    return IterationStats(**stats)


def _thread_names(threads: pd.DataFrame | None) -> dict[tuple[int, int], str]:
    if threads is None or len(threads) == 0 or "name" not in threads or "global_tid" not in threads:
        return {}
    gt = threads["global_tid"].to_numpy().astype(np.int64)
    pid = threads["pid"].to_numpy().astype(np.int64) if "pid" in threads else (gt >> 24) & 0xFFFFFF
    tid = threads["tid"].to_numpy().astype(np.int64) if "tid" in threads else gt & 0xFFFFFF
    names = threads["name"].astype(object).tolist()
    return {(int(p), int(t)): str(n) for p, t, n in zip(pid.tolist(), tid.tolist(), names) if isinstance(n, str) and n}


def _sequences(table: pd.DataFrame, threads: pd.DataFrame | None) -> list[dict[str, Any]]:
    """One summary per sequence (the iterations of one thread), named by its thread: several worker
    threads each running their own loop are as many iterations side by side, each with its period."""
    names = _thread_names(threads)
    out = []
    for (pid, tid), g in table.groupby(["pid", "tid"], sort=True):
        st = g.loc[~g["warmup"]]
        per = st["period_ns"].to_numpy()
        per = per[per >= 0]
        lat = st["latency_ns"].to_numpy()
        out.append({"pid": int(pid), "tid": int(tid), "thread": names.get((int(pid), int(tid))),
                    "count": int(len(st)), "warmup": int(g["warmup"].sum()),
                    "period_p50_ns": int(round(float(np.median(per)))) if per.size else None,
                    "period_mean_ns": int(round(float(per.mean()))) if per.size else None,
                    "latency_p50_ns": int(round(float(np.median(lat)))) if lat.size else None})
    return out
