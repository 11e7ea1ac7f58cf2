"""The report's sections beyond time: device memory, unified memory, running or blocked, pipeline
stages and GPUs of one process, slow iterations, and the inputs the trace lacks (with the flag that
adds each). Each is a ``Table``; a section with no rows is left out by the view."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsysan.report import deflate
from nsysan.report.encoding import varint
from nsysan.report.tables import Table, table
from nsysan.units import fmt_bytes, fmt_ns, fmt_pct

MIB = 1 << 20


def _count(v: Any) -> str:
    return f"{int(v):,}"


def resources_tables(a: Any) -> list[Table]:
    return [_slow(a), _memory(a), _unified(a), _threads(a), *_stages(a), _missing(a)]


def _memory(a: Any) -> Table:
    m = a.memory
    if m is None or not m.recorded:
        return Table("memory", "Device memory", [], [], [])
    note = "Live device memory per device and process (allocations - deallocations of device kinds)."
    if len(m.growth):
        g = m.growth.iloc[0]
        note += (f" Growth per steady iteration: {float(g['growth_per_iteration_bytes']) / MIB:,.1f} MiB (it rose in "
                 f"{int(g['grew_in'])} of {int(g['steps'])} iterations, counted on their allocation calls); allocated {fmt_bytes(int(g['allocated_bytes']))}, "
                 f"freed {fmt_bytes(int(g['freed_bytes']))} in the steady state.")
    return table("memory", "Device memory", m.per_process, [
        ("GPU", "device_id", None), ("pid", "pid", None), ("Allocations", "allocations", _count),
        ("Frees", "frees", _count), ("Allocated", "allocated_bytes", fmt_bytes), ("Freed", "freed_bytes", fmt_bytes),
        ("Peak", "peak_bytes", fmt_bytes), ("Peak at", "peak_ns", lambda v: fmt_ns(v - a.capture.start_ns)),
        ("Live at end", "live_end_bytes", fmt_bytes), ("Device memory", "device_total_bytes", fmt_bytes)], note=note)


def _unified(a: Any) -> Table:
    u = a.unified
    if u is None or not u.present:
        return Table("unified", "Unified memory", [], [], [])
    causes = "; ".join(f"{c}: {v['count']:,} migrations, {fmt_bytes(v['bytes'])}" for c, v in u.by_cause.items())
    note = (f"Migrations: {causes}. {fmt_bytes(u.bytes_htod)} to the device, {fmt_bytes(u.bytes_dtoh)} back. "
            + (f"{u.gpu_faults:,} GPU page faults in {u.gpu_fault_groups:,} groups, {u.cpu_faults:,} CPU page faults."
               if u.faults_recorded else "Page faults not recorded (" + " ".join(u.missing) + ")."))
    if len(u.per_kernel):
        return table("unified", "Unified memory: kernel time while page faults were pending", u.per_kernel, [
            ("Kernel", "name", lambda v: str(v)[:140]), ("Count", "count", _count), ("Total", "total_ns", fmt_ns),
            ("While faults pending", "faulted_ns", fmt_ns)], note=note)
    return table("unified", "Unified memory per iteration", u.per_iteration, [
        ("#", "index", None), ("pid", "pid", None), ("GPU faults", "gpu_faults", _count),
        ("CPU faults", "cpu_faults", _count), ("To device", "bytes_htod", fmt_bytes), ("To host", "bytes_dtoh", fmt_bytes)],
        note=note)


def _threads(a: Any) -> Table:
    th = a.thread_states
    if th is None or not th.recorded:
        return Table("threads", "Running or blocked", [], [], [])
    r = th.ranges.sort_values("total_ns", ascending=False) if len(th.ranges) else th.ranges
    return table("threads", "Running or blocked (program ranges on launching threads)", r, [
        ("Range", "name", lambda v: str(v)[:140]), ("pid", "pid", None), ("tid", "tid", None),
        ("Instances", "instances", _count), ("Total", "total_ns", fmt_ns), ("Running", "running_ns", fmt_ns),
        ("Off CPU", "off_cpu_ns", fmt_ns), ("Off CPU share", "off_cpu_share", fmt_pct),
        ("Mostly off CPU in", "top_call", None)],
        note="From the context switches (SCHED_EVENTS): on a CPU (running) or off it (blocked on a lock, a queue, "
             "I/O, or waiting for a CPU); the OS runtime call the thread sat in, or 'not in a traced call'.")


def _stages(a: Any) -> list[Table]:
    st = a.stages
    out: list[Table] = []
    if st is None:
        return out
    if st.pipeline is not None:
        p = st.pipeline
        note = (f"Per steady iteration. Balanced stages would take {fmt_ns(p.saving_per_iteration_ns)} off each step "
                "(slowest stage's compute - the mean).")
        if p.ideal_bubble is not None:
            note += f" Ideal bubble with {p.micro_batches} micro-batches: {fmt_pct(p.ideal_bubble)}."
        out.append(table("stages", "Pipeline stages (point-to-point ranks)", p.stages, [
            ("pid", "pid", None), ("GPU", "device_id", None), ("Iterations", "iterations", _count),
            ("Compute / it", "compute_ns", fmt_ns), ("Send/recv alone / it", "p2p_ns", fmt_ns),
            ("Idle / it", "idle_ns", fmt_ns), ("Step", "step_ns", fmt_ns), ("Without compute", "bubble", fmt_pct)],
            note=note))
    if st.turns:
        rows = pd.DataFrame([{"pid": t.pid, "devices": ", ".join(str(d) for d in t.devices),
                              "compute": ", ".join(f"GPU {d}: {fmt_ns(v)}" for d, v in sorted(t.compute_ns.items())),
                              "union_ns": t.union_ns, "both_ns": t.both_ns, "both_share": t.both_share} for t in st.turns])
        out.append(table("multi_gpu", "GPUs of one process", rows, [
            ("pid", "pid", None), ("GPUs", "devices", None), ("Compute", "compute", None),
            ("Any computes", "union_ns", fmt_ns), ("At least two compute", "both_ns", fmt_ns),
            ("Share at once", "both_share", fmt_pct)],
            note="A process with compute on several GPUs: how much of the time they compute at once."))
    return out


def _slow(a: Any) -> Table:
    s = a.slow_iterations
    if s is None or len(s.table) == 0:
        return Table("slow_iterations", "Slow iterations", [], [], [])
    t = s.table.assign(new=s.table["new_kernels"].map(len), ranges=s.table["extra_ranges"].map(", ".join))
    return table("slow_iterations", "Slow iterations (over 2x the typical period)", t, [
        ("#", "index", None), ("pid", "pid", None), ("tid", "tid", None), ("Period", "period_ns", fmt_ns),
        ("Typical", "median_ns", fmt_ns), ("Cost", "cost_ns", fmt_ns), ("Cause", "cause", None),
        ("GPU busy", "gpu_busy_ns", fmt_ns), ("Kernels", "kernels", _count), ("New kernel names", "new", _count),
        ("Alloc calls", "alloc_calls", _count), ("File I/O", "io_ns", fmt_ns), ("Extra ranges", "ranges", None),
        ("Untraced", "untraced_ns", fmt_ns)],
        note=f"Steady iterations whose period is over {s.factor:g}x their thread's median; cost = period - median. "
             f"Together {fmt_ns(s.cost_ns)} of {fmt_ns(s.steady_span_ns)}.")


def _missing(a: Any) -> Table:
    miss = list(a.inputs_missing)
    return table("inputs_missing", "What this trace lacks, and the flag that adds it", pd.DataFrame(miss), [
        ("Input", "input", None), ("nsys profile flag", "flag", None), ("What it would tell", "for", None)],
        note="Recorded data some analyses need; nsysan profile --diagnose records them.") if miss else \
        Table("inputs_missing", "What this trace lacks", [], [], [])


LANE_POINTS = 20_000  # samples of live memory per lane, evenly spaced over the capture


def memory_lanes(a: Any, t0: int) -> list[dict[str, Any]]:
    """A timeline lane per (device, process) with memory usage events: live device memory sampled at
    ``LANE_POINTS`` even times over the capture (the value in force at each: a step function), in the
    GPU-metrics lanes' encoding (percent of the pair's peak, one byte a sample; metrics_lane.js)."""
    m = a.memory
    if m is None or not m.recorded or len(m.series) == 0:
        return []
    out = []
    lo, hi = int(a.capture.start_ns), int(a.capture.end_ns)
    if hi <= lo:
        return []
    grid = np.linspace(lo, hi, LANE_POINTS).astype(np.int64)
    period = max(1, int((hi - lo) // max(1, LANE_POINTS - 1)))
    for (dev, pid), g in m.series.groupby(["device_id", "pid"], sort=True):
        t = g["t_ns"].to_numpy(np.int64)
        v = g["live_bytes"].to_numpy(np.float64)
        peak = float(v.max()) if len(v) else 0.0
        if peak <= 0:
            continue
        k = np.searchsorted(t, grid, side="right") - 1
        live = np.where(k >= 0, v[np.clip(k, 0, None)], 0.0)
        pct = np.clip(np.rint(live / peak * 100), 0, 100).astype(np.uint8)
        rel = grid - t0
        first = int(rel[0])
        label = f"live memory, % of its peak {fmt_bytes(int(peak))}"
        out.append({"label": f"pid {int(pid)} · GPU {int(dev)} · device memory (peak {fmt_bytes(int(peak))})",
                    "group": "metrics", "n": len(grid), "first": first, "period": period,
                    "t": deflate.text([varint(np.diff(rel, prepend=first))]),
                    "series": [{"key": "memory", "label": label, "data": deflate.text([pct.tobytes()])}]})
    return out
