"""The other levels of the loop around the iteration: sub-steps inside it, ranges that enclose it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.iterations.facts import _Facts
from nsysan.analyses.iterations.nesting import NEST_MIN, _holder, _Inst, _instances, _thread_rows

MAX_SUBSTEPS = 12  # sub-step ranges shown per iteration (the most CPU time per iteration first)


def _levels(table: pd.DataFrame, rg: pd.DataFrame, chosen: str,
            facts: _Facts) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The other levels of the loop around the iteration: every range of the program's own repeated
    at least ``MIN_INSTANCES`` times on a thread (GPU work or not: a CPU-only 'load_batch' is part of
    the breakdown too) that runs inside the iterations (``NEST_MIN`` of its
    instances: a sub-step, with its count, CPU time and launched GPU time per iteration) or around
    them (an enclosing level, with the iterations per instance). Sub-step instances are counted on
    the iteration's thread, inside its CPU range [start, start + cpu], innermost instances only."""
    empty = pd.DataFrame(columns=["index", "pid", "tid", "name", "count", "cpu_ns", "gpu_ns"])
    if len(table) == 0:
        return empty, []
    cpu_end = (table["start_ns"].to_numpy() + table["cpu_ns"].to_numpy()).astype(np.int64)
    iters = _Inst(table["pid"].to_numpy().astype(np.int64), table["tid"].to_numpy().astype(np.int64),
                  table["start_ns"].to_numpy().astype(np.int64), cpu_end, table["cpu_ns"].to_numpy(), 0)
    steady = ~table["warmup"].to_numpy()
    loops = set(zip(iters.pid.tolist(), iters.tid.tolist()))
    helpers: dict[int, tuple[tuple[int, int], ...]] = {}
    for key in sorted(facts.by_thread):
        if key not in loops:
            helpers[key[0]] = helpers.get(key[0], ()) + (key,)
    parts: list[pd.DataFrame] = []
    levels: list[dict[str, Any]] = []
    own_depth = facts.repeated.get(chosen)
    for name in sorted(set(facts.repeated) - {chosen}):
        if own_depth is not None and facts.repeated[name] == own_depth:  # same depth: neither inside nor around
            continue
        inner = _instances(rg, facts.rows[name], facts)
        h = _holder(iters, inner)
        if len(inner.start) and float((h >= 0).mean()) >= NEST_MIN:
            held = h >= 0
            count = np.bincount(h[held], minlength=len(table)).astype(np.int64)
            cpu = np.zeros(len(table), dtype=np.int64)
            np.add.at(cpu, h[held], inner.dur[held])
            gpu = np.zeros(len(table), dtype=np.int64)
            if facts.sums is not None:
                for k, ii in _thread_rows(inner.pid[held], inner.tid[held], inner.start[held]).items():
                    # its thread's launches and those of the process's threads that run no
                    # iteration (PyTorch's autograd thread), as for the iteration's own completion
                    keys = tuple([k] if k in facts.by_thread else []) + helpers.get(k[0], ())
                    if not keys:
                        continue
                    api, csum = facts.sums(keys)
                    rows = np.flatnonzero(held)[ii]
                    lo = np.searchsorted(api, inner.start[rows], side="left")
                    hi = np.searchsorted(api, inner.end[rows], side="right")
                    np.add.at(gpu, h[rows], csum[hi] - csum[lo])
            parts.append(pd.DataFrame({"index": table["index"].to_numpy(), "pid": table["pid"].to_numpy(),
                                       "tid": table["tid"].to_numpy(), "name": name, "count": count,
                                       "cpu_ns": cpu, "gpu_ns": gpu}))
            c, it_cpu = count[steady], table["cpu_ns"].to_numpy()[steady]
            levels.append({"name": name, "role": "sub-step", "instances": int(len(inner.start)),
                           "per_iteration_p50": float(np.median(c)) if c.size else 0.0,
                           "per_iteration_min": int(c.min()) if c.size else 0,
                           "per_iteration_max": int(c.max()) if c.size else 0,
                           "cpu_per_iteration_mean_ns": int(round(float(cpu[steady].mean()))) if c.size else 0,
                           "gpu_per_iteration_mean_ns": int(round(float(gpu[steady].mean()))) if c.size else 0,
                           "cpu_share": round(float(cpu[steady].sum() / it_cpu.sum()), 4) if it_cpu.sum() > 0 else 0.0})
            continue
        hu = _holder(inner, iters)
        if float((hu >= 0).mean()) >= NEST_MIN:
            per = np.bincount(hu[hu >= 0], minlength=len(inner.start))
            per = per[per > 0]
            levels.append({"name": name, "role": "encloses the iterations", "instances": int(len(inner.start)),
                           "iterations_per_instance_p50": float(np.median(per)),
                           "iterations_per_instance_min": int(per.min()), "iterations_per_instance_max": int(per.max()),
                           "mean_ns": int(round(float(inner.dur.mean())))})
    # enclosing levels first, then the sub-steps with the most CPU time per iteration (at most
    # MAX_SUBSTEPS: a loop annotated per layer still gives a table a reader can take in)
    subs = sorted((lv for lv in levels if lv["role"] == "sub-step"),
                  key=lambda lv: (-lv["cpu_per_iteration_mean_ns"], lv["name"]))[:MAX_SUBSTEPS]
    kept = {lv["name"] for lv in subs}
    levels = [lv for lv in levels if lv["role"] != "sub-step"] + subs
    parts = [pt for pt in parts if pt["name"].iloc[0] in kept]
    sub = pd.concat(parts, ignore_index=True) if parts else empty
    return sub, levels
