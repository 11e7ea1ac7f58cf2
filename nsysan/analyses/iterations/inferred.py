"""Iterations inferred from the GPU work itself, for programs with no NVTX range of their own that repeats.

Most traces arrive without annotations (a plain training script, Lightning, the Hugging Face Trainer,
JAX, a serving loop). Their loop is still in the trace: the launching thread issues the same sequence
of GPU operations once per step. ``infer`` finds that unit.

**The launch stream** of each process (``launch_stream``), cut into its **repeating unit**
(``repeating_unit``: the anchor, the boundary, graphs that take turns), on its threads
(``thread_loops``: threads that take turns or launch side by side, threads that continue a loop);
this module turns the loops found into iterations.

**Declined** when no symbol scores ``MIN_SCORE``, fewer than ``MIN_REPEATS`` iterations are found, or
the iterations launched less than ``MIN_COVERAGE`` of the GPU time: then there is no iteration, as
before, and ``why`` says what was tried.

Anything that marks the loop exactly is better: ``torch.cuda.nvtx.range("step")``, ``nvtx.annotate``
or ``nsysan profile --annotate`` (docs/iterations.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.iterations.launch_stream import LaunchStream, launch_streams, symbol_names
from nsysan.analyses.iterations.repeating_unit import MIN_REPEATS, RepeatingUnit, graph_aliases
from nsysan.analyses.iterations.thread_loops import main_loops, process_loops

INFERRED_NAME = "GPU-inferred step"
INFERRED_HOW = "inferred (from the GPU work: no NVTX range of the program's own repeats)"
INFERRED_LEAD = 0.25  # the leading share of inferred iterations a slow one extends the warm-up over
MIN_COVERAGE = 0.25


@dataclass(frozen=True)
class Inferred:
    """Iterations found in the GPU work: ``instances`` has one row per iteration in the columns of
    ``nvtx.ranges`` that the iteration model reads (pid, tid, start_ns, end_ns, dur_ns, gpu_ops,
    proj_start_ns, proj_end_ns, proj_ns, gpu_after_end_ns); ``loops`` one summary per loop found."""
    instances: pd.DataFrame
    loops: list[dict[str, Any]] = field(default_factory=list)
    why: str = ""


def infer(ops: pd.DataFrame) -> Inferred:
    """Iterations from the GPU work (module doc); ``instances`` is empty when none is found, and
    ``why`` then says why."""
    streams = launch_streams(ops)
    names = symbol_names(ops) if len(ops) else []
    total = sum(int(s.gpu_ns.sum()) for s in streams)  # the GPU time of ops whose launch is in the trace
    rows: list[pd.DataFrame] = []
    loops: list[dict[str, Any]] = []
    covered = 0
    aside: list[str] = []
    for s in streams:
        alias = graph_aliases(s.sym, names, s.gpu_ns)  # once per process: both readers below use it
        read = s.sym if alias is None else alias
        found, apart = main_loops(s, process_loops(s, names, read), read)
        aside += [_describe(s, rows_of, unit, names) for rows_of, unit in apart]
        for rows_of, unit in found:
            frame, loop, cov = _instances(s, rows_of, unit, names)
            rows.append(frame)
            loops.append(loop)
            covered += cov
    empty = pd.DataFrame(columns=["pid", "tid", "start_ns", "end_ns", "dur_ns", "gpu_ops", "proj_start_ns",
                                  "proj_end_ns", "proj_ns", "gpu_after_end_ns"])
    if not rows:
        return Inferred(empty, [], "no sequence of GPU operations repeats at least "
                        f"{MIN_REPEATS} times alike on any launching thread")
    if total > 0 and covered / total < MIN_COVERAGE:
        return Inferred(empty, loops, f"the repeating sequences launched {covered / total:.0%} of the GPU time "
                        f"(an iteration launches at least {MIN_COVERAGE:.0%})")
    why = _why(loops, covered / total if total else 0.0)
    if aside:
        why += "; not counted as steps, as they run before or after that loop: " + "; ".join(aside)
    return Inferred(pd.concat(rows, ignore_index=True), loops, why)


def _describe(s: LaunchStream, rows: np.ndarray, unit: RepeatingUnit, names: list[str]) -> str:
    tid = int(np.bincount(np.unique(s.tid[rows], return_inverse=True)[1][unit.starts]).argmax())
    first = names[unit.first_symbol] if unit.first_symbol < len(names) else ""
    return (f"a {unit.length}-launch sequence starting with '{_short(first)}' repeats {len(unit.starts)} times "
            f"on thread {int(np.unique(s.tid[rows])[tid])} of process {s.pid}")


def _instances(s: LaunchStream, rows_of: np.ndarray, unit: RepeatingUnit,
               names: list[str]) -> tuple[pd.DataFrame, dict[str, Any], int]:
    """The iterations of one loop as range rows on its main thread, its summary and the GPU time its
    launches hold."""
    starts = unit.starts
    stop = unit.stop  # the iterations hold launches [starts[k], starts[k + 1]) and the last [starts[-1], stop)
    tid_all = s.tid[rows_of]
    main = int(np.bincount(np.unique(tid_all, return_inverse=True)[1][starts]).argmax())
    main_tid = int(np.unique(tid_all)[main])
    a0 = s.api_start[rows_of]
    cpu_start = a0[starts]
    last_end = int(s.api_end[rows_of][int(starts[-1]):stop].max())
    cpu_end = np.append(a0[starts[1:]] - 1, max(last_end, int(cpu_start[-1])))
    on_main = (tid_all == main_tid)[:stop]
    gs, ge = s.gpu_start[rows_of][:stop], s.gpu_end[rows_of][:stop]
    cov = int(s.gpu_ns[rows_of][int(starts[0]):stop].sum())
    # per iteration, over the main thread's launches only (the others' are the helper threads' work the
    # model adds): their count and first start and last end, one reduction each (no step per iteration)
    in_main = np.concatenate([[0], np.cumsum(on_main)])
    count = (in_main[np.append(starts[1:], stop)] - in_main[starts]).astype(np.int64)
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    p_start = np.minimum.reduceat(np.where(on_main, gs, big), starts)
    p_end = np.maximum.reduceat(np.where(on_main, ge, small), starts)
    n_it = len(starts)
    p_start, p_end = np.where(count > 0, p_start, -1), np.where(count > 0, p_end, -1)
    has = count > 0
    if has[-1]:  # the last one's CPU range: until its GPU work is done (the synchronize that ends a step is
        # the step's, as in the others, whose ranges run to the next step), unless its thread launches sooner
        later = s.api_start[(s.tid == main_tid) & (s.api_start > last_end)]
        bound = int(later.min()) - 1 if len(later) else big
        cpu_end[-1] = max(int(cpu_end[-1]), min(int(p_end[-1]), bound))
    frame = pd.DataFrame({
        "pid": np.full(n_it, s.pid, dtype=np.int64), "tid": np.full(n_it, main_tid, dtype=np.int64),
        "start_ns": cpu_start.astype(np.int64), "end_ns": cpu_end.astype(np.int64),
        "dur_ns": (cpu_end - cpu_start).astype(np.int64), "gpu_ops": count, "proj_start_ns": p_start,
        "proj_end_ns": p_end, "proj_ns": np.where(has, p_end - p_start, 0),
        "gpu_after_end_ns": np.where(has, np.maximum(p_end - cpu_end, 0), 0)})
    devices = sorted(set(s.device[rows_of][int(starts[0]):stop].tolist()))
    loop = {"pid": s.pid, "tid": main_tid, "threads": len(np.unique(tid_all)), "iterations": n_it,
            "launches_per_iteration": unit.length, "anchor": names[unit.anchor] if unit.anchor < len(names) else "",
            "first": names[unit.first_symbol] if unit.first_symbol < len(names) else "",
            "score": round(unit.score, 4), "devices": devices}
    return frame, loop, cov


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[:limit - 3] + "..."


def _why(loops: list[dict[str, Any]], coverage: float) -> str:
    parts = []
    for lp in loops:
        dev = ", ".join(f"GPU {d}" for d in lp["devices"])
        parts.append(f"a {lp['launches_per_iteration']}-launch sequence starting with '{_short(lp['first'])}' "
                     f"repeats {lp['iterations']} times on thread {lp['tid']} of process {lp['pid']}"
                     + (f" ({dev})" if dev else "")
                     + (f"; {lp['score']:.0%} of the steps alike" if lp["score"] < 0.995 else ""))
    return ("inferred from the GPU work, as no NVTX range of the program's own repeats: " + "; ".join(parts)
            + f"; these iterations launched {coverage:.0%} of the GPU time")
