"""The report's table sections: the summaries of the trace (kernels, CUDA API, OS runtime, copies,
memsets, NVTX ranges, launches, idle gaps), each of the judged window with the whole capture's one
click away, and the iteration's (the iterations and their levels, TensorRT layers, communication,
ranks, the candidate ranges, nsys analyze cross-checked)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsysan.report.tables import MAX_TABLE_ROWS, Table, table
from nsysan.units import fmt_bytes, fmt_ns, fmt_pct, fmt_rate


def _largest_in_window(df: pd.DataFrame, col: str, start_ns: int, end_ns: int) -> pd.DataFrame:
    """``in_window(df, ...)`` (or ``df``)``.nlargest(MAX_TABLE_ROWS, col)``, the same rows in the same
    order, choosing on ``col`` alone: only the rows shown are copied (not every gap of the window)."""
    s = df["start_ns"].to_numpy()
    mask = (s >= start_ns) & (s < end_ns)
    rows = None if bool(mask.all()) else np.flatnonzero(mask)
    del mask
    v = df[col].to_numpy()
    top = pd.Series(v if rows is None else v[rows]).nlargest(MAX_TABLE_ROWS).index.to_numpy()
    pos = top if rows is None else rows[top]
    return pd.DataFrame({c: df[c].array.take(pos) for c in df.columns}, copy=False)


def _levels_tables(a: Any) -> list[Table]:
    """Steps within steps, beneath the iterations: the sub-steps of the iteration (ranges of the
    program's own inside each iteration: how many per iteration, their time per iteration) and the
    ranges that enclose iterations; then, when several threads each run their own loop, one row per
    thread. Only when there is something to show (the report's other sections stay as they were)."""
    it = a.iterations
    out: list[Table] = []
    levels = getattr(it, "levels", None) or []
    if levels:
        rows = []
        for lv in levels:
            if lv["role"] == "sub-step":
                per = (f"{lv['per_iteration_p50']:g}" + (f" ({lv['per_iteration_min']}-{lv['per_iteration_max']})"
                                                         if lv["per_iteration_min"] != lv["per_iteration_max"] else ""))
                rows.append({"name": lv["name"], "role": f"sub-step of each '{it.range_name}'",
                             "instances": lv["instances"], "per": per,
                             "cpu": lv["cpu_per_iteration_mean_ns"], "gpu": lv["gpu_per_iteration_mean_ns"],
                             "share": lv["cpu_share"]})
            else:
                per = (f"{lv['iterations_per_instance_p50']:g} iterations"
                       + (f" ({lv['iterations_per_instance_min']}-{lv['iterations_per_instance_max']})"
                          if lv["iterations_per_instance_min"] != lv["iterations_per_instance_max"] else ""))
                rows.append({"name": lv["name"], "role": f"encloses '{it.range_name}' iterations",
                             "instances": lv["instances"], "per": per, "cpu": None, "gpu": None, "share": None})
        out.append(table("iteration_levels", f"Steps within the iteration ('{it.range_name}')", pd.DataFrame(rows), [
            ("Range", "name", lambda v: str(v)[:140]), ("Level", "role", None),
            ("Instances", "instances", lambda v: f"{int(v):,}"), ("Per iteration", "per", None),
            ("CPU per iteration", "cpu", fmt_ns), ("GPU launched per iteration", "gpu", fmt_ns),
            ("Share of the iteration's CPU time", "share", fmt_pct)],
            note="Ranges of the program's own inside each iteration (its breakdown: how many per iteration, "
                 "steady-state means of their CPU time and of the GPU time launched inside them, from their "
                 "thread or a helper thread of the process such as the autograd thread) and ranges around "
                 "iterations. Every iteration's counts are in --json (iterations.substeps)."))
    seqs = getattr(it, "sequences", None) or []
    if len(seqs) > 1:
        out.append(table("iteration_threads", "Loops per thread", pd.DataFrame(seqs), [
            ("Thread", "thread", lambda v: str(v)[:80]), ("pid", "pid", None), ("tid", "tid", None),
            ("Iterations", "count", lambda v: f"{int(v):,}"), ("Warm-up", "warmup", lambda v: f"{int(v):,}"),
            ("Period p50", "period_p50_ns", fmt_ns), ("Latency p50", "latency_p50_ns", fmt_ns)],
            note="Each thread (or process) that runs the iteration range runs its own loop: one sequence each, "
                 "with its own period."))
    return out


def _tensorrt_table(a: Any) -> Table:
    """The per-layer table of every engine, with a bar per layer (its share of the execution: GPU
    time when recorded, else host time), in execution order; sortable like the other tables."""
    tr = a.tensorrt
    if tr is None or not tr.found or len(tr.table) == 0:
        return Table("tensorrt", "TensorRT layers", [], [], [],
                     "No TensorRT engine executions (ExecutionContext::execute/enqueue NVTX ranges) in this trace."
                     if tr is None or not tr.found else
                     "TensorRT executions without layer ranges: build with --profilingVerbosity=detailed.")
    t = tr.table
    gpu = tr.gpu_recorded
    share_col = "gpu_share" if gpu else "cpu_share"
    cols: list[tuple[str, str, Any]] = [
        ("Engine", "engine", None), ("#", "order", lambda v: str(v) if v < 10**9 else "-"),
        ("Layer", "layer", lambda v: str(v)[:200]), ("Kind", "kind", None), ("Count", "count", lambda v: f"{int(v):,}"),
        ("CPU avg", "cpu_avg_ns", fmt_ns)]
    if gpu:
        cols += [("GPU avg", "gpu_avg_ns", fmt_ns), ("GPU total", "gpu_total_ns", fmt_ns)]
    cols += [("Share of execution" + (" (GPU)" if gpu else " (CPU)"), share_col, fmt_pct)]
    if gpu:
        cols += [("Precision", "precision", None)]
    cols += [("Reformat", "reformat_by", lambda v: v or ""), ("Fused ONNX nodes", "fused", lambda v: f"{int(v)}"),
             ("Nodes", "nodes", lambda v: str(v)[:300])]
    tab = table("tensorrt", "TensorRT layers per engine", t, cols)
    shares = pd.to_numeric(t[share_col], errors="coerce").fillna(0.0).to_numpy(float)[:MAX_TABLE_ROWS]
    top = float(shares.max()) if len(shares) else 0.0
    tab.bar_column = [c[1] for c in cols].index(share_col)
    tab.bars = [float(x / top) if top > 0 else 0.0 for x in shares]
    eng = "; ".join(
        f"{r['label']}: {int(r['executions'])} executions ({int(r['steady_executions'])} in the steady state), "
        f"{int(r['contexts'])} thread/stream pair(s), CPU p50 {fmt_ns(r['cpu_p50_ns'])}"
        + (f", GPU p50 {fmt_ns(r['gpu_p50_ns'])}" if gpu else "")
        + (f", {int(r['sync_executions'])} synchronous (execute)" if r["sync_executions"] else "")
        + (f", {int(r['captured_executions'])} captured into a CUDA Graph, {int(r['graph_replays'])} graph replays"
           if r["captured_executions"] else "")
        for r in tr.engines.to_dict("records"))
    tab.note = " ".join(x for x in [
        f"Executions of the {tr.table_window}. {eng}.",
        "GPU time: ops launched inside the layer's range (sum of durations); share: of the engine's execution "
        + ("GPU time." if gpu else "host time."),
        *[n[0].upper() + n[1:] + "." for n in tr.notes], tab.note] if x)
    return tab


def _stat_cols(first: list[tuple[str, str, Any]]) -> list[tuple[str, str, Any]]:
    return first + [("Count", "count", lambda v: f"{int(v):,}"), ("Total", "total_ns", fmt_ns),
                    ("Share", "share", fmt_pct), ("Avg", "avg_ns", fmt_ns), ("Med", "med_ns", fmt_ns),
                    ("Min", "min_ns", fmt_ns), ("Max", "max_ns", fmt_ns), ("StdDev", "std_ns", fmt_ns)]


def _steady_first(a: Any, tid: str, title: str, steady_df: Any, capture_df: pd.DataFrame,
                  cols: list[tuple[str, str, Any]], note: str = "") -> Table:
    """The steady-state table, with the whole capture's one click away (or only the capture's
    when the steady window is the capture)."""
    if steady_df is None or a.steady.kind == "capture":
        return table(tid, title, capture_df, cols, note)
    t = table(tid, title, steady_df, cols, note)
    t.alt = table(tid + "-capture", title, capture_df, cols, note)
    t.alt_label = (f"{a.steady.label} ({fmt_ns(a.steady.dur_ns)})"
                   f"|whole capture ({fmt_ns(a.capture.dur_ns)}, with warm-up)")
    return t


def summary_tables(a: Any) -> list[Table]:
    """Kernels, CUDA API, OS runtime, copies, memsets, NVTX ranges, launches and idle gaps."""
    ss = a.steady_summaries
    g = a.gaps
    gap_cols = [("Device", "device_id", None), ("Start", "start_ns", lambda v: fmt_ns(v - a.capture.start_ns)),
                ("Gap", "gap_ns", fmt_ns), ("Cause", "cause", None), ("Submitting thread was in", "activity", None),
                ("Next API", "api_name", None), ("Next op", "next_op", lambda v: str(v)[:120])]
    gaps_steady = None
    if len(g):  # a window owns the gaps that start in it, as it owns ops and calls
        gaps_steady = _largest_in_window(g, "gap_ns", a.steady.start_ns, a.steady.end_ns)
    return [
        _steady_first(a, "kernels", "Kernels", ss.get("kernels"), a.kernels, _stat_cols([("Name", "name", None)])),
        _steady_first(a, "api", "CUDA API", ss.get("cuda_api"), a.cuda_api, _stat_cols([("Name", "name", None)])),
        table("osrt", "OS runtime calls", a.osrt, _stat_cols([("Function", "name", None)]),
              note="libc calls traced by nsys -t osrt (only calls longer than its --osrt-threshold)."),
        _steady_first(a, "memcpy", "Memory copies", ss.get("memcpy"), a.memcpy, _stat_cols([("Kind", "kind", None)]) + [
            ("Bytes", "total_bytes", fmt_bytes), ("Throughput", "throughput_bytes_per_s", fmt_rate),
            ("Pageable", "pageable_count", lambda v: f"{int(v):,}"),
            ("Pinned", "pinned_count", lambda v: f"{int(v):,}")]),
        table("memset", "Memsets", a.memset,
              _stat_cols([("Kind", "kind", None)]) + [("Bytes", "total_bytes", fmt_bytes)]),
        table("nvtx", "NVTX ranges", a.nvtx, [c for c in _stat_cols([("Range", "name", None), ("Style", "style", None)])
                                              if c[1] != "share"] + [
            ("Self total", "self_total_ns", fmt_ns), ("GPU proj. total", "proj_total_ns", fmt_ns),
            ("GPU ops", "gpu_ops", lambda v: f"{int(v):,}"), ("Max GPU after end", "max_gpu_after_end_ns", fmt_ns)],
            note="A GPU op belongs to a range when its launching API call started on the range's thread inside it. "
                 "No share column: ranges nest, so their times overlap and would add up past 100%."),
        table("launches", "Launches (API call vs kernel)", a.launch_per_kernel, [
            ("API", "api_name", None), ("Kernel", "name", None), ("Count", "count", lambda v: f"{int(v):,}"),
            ("API med", "api_med_ns", fmt_ns), ("Queue med", "queue_med_ns", fmt_ns), ("GPU med", "gpu_med_ns", fmt_ns),
            ("Launch > run", "launch_dominated_frac", fmt_pct)]),
        _steady_first(a, "gaps", "Largest GPU idle gaps", gaps_steady,
                      g.nlargest(MAX_TABLE_ROWS, "gap_ns") if len(g) else g, gap_cols,
                      note="Every idle gap longer than --min-gap-us, longest first, with its cause."),
    ]


def iteration_tables(a: Any) -> list[Table]:
    """The iterations and their levels, TensorRT, communication, ranks, the iteration's candidates, nsys."""
    it = a.iterations.table
    return [
        table("iterations", f"Iterations ({a.iterations.range_name or 'none found'})", it, [
            ("#", "index", None), ("Period", "period_ns", lambda v: fmt_ns(v) if v >= 0 else "-"),
            ("Latency", "latency_ns", fmt_ns), ("Queued ahead", "queue_depth", lambda v: f"{int(v)}"),
            ("CPU", "cpu_ns", fmt_ns),
            ("GPU projection", "gpu_proj_ns", fmt_ns), ("GPU after range end", "gpu_after_end_ns", fmt_ns),
            ("Warm-up", "warmup", lambda v: "yes" if v else "")],
            note="Period: time since the previous iteration of the same thread completed (what gets faster when "
                 "the program does). Latency: range start to the end of its GPU work; when the CPU queues "
                 "iterations ahead of the GPU it includes the wait in the queue.") if len(it) else
        Table("iterations", "Iterations", [], [], [],
              (a.iterations.why or "No repeated NVTX range found.") + " (choose one with --iteration-range NAME)"),
        *_levels_tables(a),
        _tensorrt_table(a),
        table("collectives", "Communication (steady state)", a.collectives, [
            ("Device", "device_id", None), ("Collective", "collective", None),
            ("Count", "count", lambda v: f"{int(v):,}"), ("Total", "total_ns", fmt_ns),
            ("Exposed (no compute)", "exposed_ns", fmt_ns), ("Hidden under compute", "hidden_ns", fmt_ns),
            ("Mean", "mean_ns", fmt_ns), ("Max", "max_ns", fmt_ns)],
            note="Communication kernels (NCCL and the like) per device. Exposed time ran while no compute kernel "
                 "ran on the device: overlapping it with compute (DDP buckets, FSDP prefetch) would save it.")
        if len(a.collectives) else
        Table("collectives", "Communication", [], [], [], "No communication kernels (NCCL ...) in the steady state."),
        table("ranks", "Ranks (processes with communication), aligned on their collectives",
              a.ranks.ranks if a.ranks is not None else pd.DataFrame(), [
            ("Rank", "rank", None), ("pid", "pid", None), ("GPU", "device_id", None),
            ("Iterations", "iterations", None), ("Period p50", "period_p50_ns", fmt_ns),
            ("Compute / it", "compute_per_iter_ns", fmt_ns), ("Comm / it", "comm_per_iter_ns", fmt_ns),
            ("Comm exposed / it", "comm_exposed_per_iter_ns", fmt_ns), ("Waiting / it", "wait_per_iter_ns", fmt_ns),
            ("Transfer / it", "transfer_per_iter_ns", fmt_ns), ("Host late / it", "host_idle_per_iter_ns", fmt_ns),
            ("Arrived last", "arrived_last", None)],
            note=(a.ranks.verdict if a.ranks is not None else "") + ". Waiting: time in a collective before the last "
                 "rank arrived; transfer: after it.")
        if a.ranks is not None and len(a.ranks.ranks) > 1 else
        Table("ranks", "Ranks", [], [], [], "One process with communication, or none: no ranks to align."),
        table("iteration_candidates", "Which range is the iteration", pd.DataFrame([c.to_json() for c in sorted(
            a.iterations.candidates, key=lambda c: (c.chosen is None, -c.gpu_coverage, -c.count,
                                                    c.name))[:MAX_TABLE_ROWS]]), [
            ("Range", "name", lambda v: str(v)[:140]), ("Instances", "count", lambda v: f"{int(v):,}"),
            ("Most on one thread", "per_thread_max", lambda v: f"{int(v):,}"),
            ("Median", "median_ns", fmt_ns), ("GPU time launched", "gpu_coverage", fmt_pct),
            ("Library", "library", lambda v: v or ""), ("Verdict", "verdict", None)],
            note="Repeated NVTX ranges considered as the iteration, and why each was or was not chosen.")
        if a.iterations.candidates else
        Table("iteration_candidates", "Which range is the iteration", [], [], [], "No repeated NVTX range."),
        table("nsys", "nsys analyze, cross-checked", a.nsys_rules, [
            ("nsys rule", "nsys_rule", None), ("What", "what", None), ("Count", "count", lambda v: f"{int(v):,}"),
            ("Total", "total_ns", fmt_ns), ("In steady state", "steady_count", lambda v: f"{int(v):,}"),
            ("Outside (one-time)", "outside_count", lambda v: f"{int(v):,}"), ("nsysan", "verdict", None)],
            note="What nsys analyze would list on this trace (its own definitions), where it falls, and which "
                 "nsysan rule judges it. Setup, warm-up and teardown are reported apart, not ranked."),
    ]
