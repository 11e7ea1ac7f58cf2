"""The ``Iterations`` result and ``iterations()``, which builds it from the chosen range (or the
iterations inferred from the GPU work: ``inferred``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.gpu import Window
from nsysan.analyses.iterations.choice import _pick, _why_chosen
from nsysan.analyses.iterations.inferred import INFERRED_HOW, INFERRED_LEAD, INFERRED_NAME, infer
from nsysan.analyses.iterations.levels import _levels
from nsysan.analyses.iterations.nesting import _pushpop, encloses_same
from nsysan.analyses.iterations.timing import _helper_thread_work, _iteration_stats, _sequence_columns, _sequences
from nsysan.analyses.iterations.values import Candidate, IterationStats
from nsysan.analyses.recorder_ranges import RECORDER_DOMAIN, STEP, added_by_recorder, iteration_steps, recorder_text


@dataclass(frozen=True)
class Iterations:
    range_name: str | None
    how: str  # "option", "auto", "auto (CPU only: no GPU activity recorded)", "none"
    table: pd.DataFrame  # one row per iteration
    warmup: int
    steady: Window | None
    stats: IterationStats = field(default_factory=IterationStats)
    timed_regions: list[dict[str, object]] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    why: str = ""
    # steps within steps: one row per iteration and sub-step range (index, pid, tid, name, count,
    # cpu_ns, gpu_ns), and one summary per other level (sub-steps, ranges that enclose iterations)
    substeps: pd.DataFrame = field(default_factory=pd.DataFrame)
    levels: list[dict[str, Any]] = field(default_factory=list)
    sequences: list[dict[str, Any]] = field(default_factory=list)  # per thread: its name, count, period


def iterations(rg: pd.DataFrame, *, name: str | None = None, warmup_factor: float = 1.5,
               owned: pd.DataFrame | None = None, gpu_recorded: bool = True,
               threads: pd.DataFrame | None = None, ops: pd.DataFrame | None = None) -> Iterations:
    """The iteration model (module doc). ``threads``: the trace's thread table (``global_tid``,
    ``name``), to name each sequence by its thread. ``ops``: the GPU operations with their launching
    calls (``summaries.gpu_ops``), from which the iterations are inferred (``inferred``) when no range
    of the program's own repeats."""
    timed = rg.loc[rg["name"].str.contains("Total Elapsed Time", regex=False)] if len(rg) else rg
    regions = [{"name": str(r["name"]), "start_ns": int(r["start_ns"]), "end_ns": int(r["end_ns"]),
                "cpu_ns": int(r["dur_ns"]),
                "with_gpu_ns": int(max(r["end_ns"], r["proj_end_ns"]) - r["start_ns"])} for _, r in timed.iterrows()]
    chosen, how, cands, facts = _pick(rg, name, owned, gpu_recorded=gpu_recorded)
    if chosen is None:
        why = ("no repeated NVTX range of the program's own launched the GPU work"
               if cands else "no repeated NVTX range in this trace")
        found = infer(ops) if ops is not None and gpu_recorded and len(ops) else None
        if found is None or len(found.instances) == 0:
            if found is not None:
                why += f", and no loop was found in the GPU work ({found.why})"
            return Iterations(None, how, pd.DataFrame(), 0, None, IterationStats(), regions, cands,
                              why + ": the GPU-active part of the capture is judged")
        return _build(found.instances, INFERRED_NAME, INFERRED_HOW, warmup_factor, owned, threads, regions,
                      cands, found.why, 0, inferred=found.loops)
    it = _recorder_steps(rg.loc[rg["name"] == chosen], rg)
    # an instance around later instances of itself (an outer 'train_step' around the next 14) is a
    # region that encloses iterations, not one: the innermost instances are the iterations
    outer = encloses_same(it["pid"].to_numpy().astype(np.int64), it["tid"].to_numpy().astype(np.int64),
                          it["start_ns"].to_numpy().astype(np.int64),
                          it["end_ns"].to_numpy().astype(np.int64)) & _pushpop(it)
    enclosing = int(outer.sum())
    if enclosing:
        it = it.loc[~outer]
    why = _why_chosen(chosen, how, cands, len(it), gpu_recorded)
    if enclosing:
        why += (f"; {enclosing} instance(s) of it enclosing later ones of the same name on their thread are "
                "regions around iterations, not iterations: the innermost instances are")
    out = _build(it, chosen, how, warmup_factor, owned, threads, regions, cands, why, enclosing)
    substeps, levels = _levels(out.table, rg, chosen, facts)
    return replace(out, substeps=substeps, levels=levels)


def _recorder_steps(it: pd.DataFrame, rg: pd.DataFrame) -> pd.DataFrame:
    """The recorder's ``step`` instances that are iterations (``recorder_ranges.iteration_steps``: the
    one nsys closed at the capture's end, which no optimizer step ended, left out); other ranges as given."""
    if not len(it) or "domain" not in it.columns or not added_by_recorder(str(it["domain"].iloc[0])):
        return it
    if recorder_text(str(it["name"].iloc[0]), str(it["domain"].iloc[0])) != STEP:
        return it
    rec = rg.loc[(rg["domain"].astype(str) == RECORDER_DOMAIN).to_numpy()]
    frame = rec.assign(text=[recorder_text(str(n), RECORDER_DOMAIN) for n in rec["name"].tolist()])
    keep = iteration_steps(frame).index
    return it.loc[it.index.isin(keep)] if len(keep) else it


def _build(it: pd.DataFrame, chosen: str, how: str, warmup_factor: float, owned: pd.DataFrame | None,
           threads: pd.DataFrame | None, regions: list[dict[str, object]], cands: list[Candidate], why: str,
           enclosing: int, inferred: list[dict[str, Any]] | None = None) -> Iterations:
    """The iterations from their instances (rows in ``nvtx.ranges``' columns, one per iteration)."""
    it = it.sort_values(["pid", "tid", "start_ns"], kind="stable").reset_index(drop=True)
    gpu_end = np.where(it["gpu_ops"] > 0, it["proj_end_ns"], it["end_ns"])
    helper_end, helper_ops = _helper_thread_work(it, owned)
    gpu_end = np.maximum(gpu_end, helper_end)
    it = it.assign(gpu_ops=it["gpu_ops"].to_numpy() + helper_ops)
    end = np.maximum(it["end_ns"].to_numpy(), gpu_end)
    table = pd.DataFrame({
        "index": np.zeros(len(it), dtype=np.int64), "pid": it["pid"], "tid": it["tid"],
        "start_ns": it["start_ns"], "end_ns": end, "cpu_ns": it["dur_ns"], "gpu_proj_ns": it["proj_ns"],
        "gpu_ops": it["gpu_ops"], "latency_ns": end - it["start_ns"].to_numpy(),
        "gpu_after_end_ns": it["gpu_after_end_ns"],
    })
    parts = [_sequence_columns(g.reset_index(drop=True), warmup_factor, INFERRED_LEAD if inferred is not None else 0.0)
             for _, g in table.groupby(["pid", "tid"], sort=True)]
    table = pd.concat(parts, ignore_index=True).sort_values(["start_ns", "pid", "tid"], kind="stable")
    table = table.reset_index(drop=True).assign(index=np.arange(len(table)))
    warm = int(table["warmup"].sum())
    steady = table.loc[~table["warmup"]]
    win = (Window(int(steady["start_ns"].min()), int(steady["end_ns"].max()), "steady state", "steady")
           if len(steady) else None)
    stats = _iteration_stats(table, steady, len(parts), enclosing, warm)
    if inferred is not None:
        stats = replace(stats, inferred_loops=inferred)
    return Iterations(chosen, how, table, warm, win, stats, regions, cands, why,
                      sequences=_sequences(table, threads))
