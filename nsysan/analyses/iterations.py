"""The iteration model: which NVTX range is one iteration, its period and latency, warm-up, steady state.

**Which range.** ``--iteration-range NAME`` (the range label ``domain:text`` or its text) or, by
default, chosen from the user's own ranges:

1. closed push/pop or start/end ranges, not library ranges (``libranges``: NCCL, CCCL/cub, cuDNN,
   cuBLAS, cuDF, TensorRT layers, PyTorch op ranges, pyprof markers, XLA thunks ...);
2. repeated at least 3 times on one thread (a sequence; several processes or threads each have one);
3. with GPU work launched below them (in at least half of the instances) when the trace recorded
   GPU activity; when it recorded none, ranges of at least 10 us judged on the CPU alone;
4. not sub-microsecond (median instance, GPU work included);
5. of those, the ones whose instances launched (nearly) the most GPU time (>= 80% of the best
   coverage, and at least 25% of all GPU time), and of these the one that repeats most often on a
   thread (the finest unit that still holds the GPU work: a decode loop's ``decode_token`` rather
   than its ``request`` ranges, a training loop's ``train_step`` rather than its ``epoch`` ranges),
   then the outermost (smallest median nesting depth), then the longest in total. A range nested in
   the iteration that also launches nearly all of its GPU work (one range per layer, say) would win:
   ``--iteration-range`` then names the iteration.

**Steps within steps.** When one qualifying range runs inside another (``NEST_MIN`` = 75% of its
instances inside one of the other's, on the same thread), the iteration is the unit the loop
repeats and the finer unit its breakdown, not a rival: the outer range is the iteration when each of
its instances holds the same number k >= 2 of the inner one (in ``REGULAR_MIN`` = 75% of them: k
micro-batches per optimizer step, the all-reduce in the last and the optimizer after them; L layers
per step) and it repeats at least ``MIN_OUTER`` = 5 times on a thread; the inner range's verdict
then says it is a sub-step. Otherwise (a varying number per instance: tokens of requests of
different lengths, the steps of partial epochs; or an outer range with few instances, an epoch)
the rules above pick the finer one. Either way ``levels`` shows the other levels: the ranges of the
program's own repeated on a thread (GPU work or not) inside the iterations, with their count and CPU and launched GPU
time per iteration (``substeps``: one row per iteration and sub-step, counted on the iteration's
thread inside its CPU range; the GPU time is that of the ops launched inside the sub-step's
instances from their thread or from a thread of the process that runs no iteration, as for the
completion below), and the ranges that enclose iterations.

**A range around itself.** A push/pop instance of the iteration range that encloses later instances
of the same name on its thread (an outer ``train_step`` around the next 14, a decorated function that
calls itself) is a region around iterations, not one: the innermost instances (those that enclose
no other) are the iterations, the count and every per-iteration number are theirs, and
``stats["enclosing_instances"]`` says how many were set aside (``why`` says so too). Candidates'
counts still list every instance (what the export holds).

**Several threads, each its own loop**: each (pid, tid) is a sequence with its own period; the
per-sequence summaries (``sequences``) carry the thread's name (``threads``).

**XLA fallback.** When no range of the program's own qualifies (JAX's own annotations missing, or
lost in export), the executions of a jitted XLA module (``XlaModule:#hlo_module=jit_step,...#``,
``libranges.xla_module``) are the iterations, judged by the same coverage and repetition tests
(``how`` = ``XLA_HOW``); never an XLA compile pass or thunk range. Then the TensorRT fallback.

GPU work launched by a thread of the same process that has no instance of the range itself (PyTorch
launches the backward pass from its autograd thread, a DataLoader pins memory on another) belongs to
the iteration during which it was launched: it counts towards the coverage and the completion.

``how`` says how the range was chosen; ``candidates`` lists the ranges considered, each with its
verdict, so a reader sees the runners-up and why the others were rejected. When no range fits,
there is no iteration and the whole capture is judged, except in one case:

**TensorRT fallback.** When no range of the program's own qualifies and the trace holds TensorRT
engine executions (``ExecutionContext::execute``/``enqueue``, see ``tensorrt``), each execution is
one iteration (``how`` = ``TENSORRT_HOW``; even one execution). A range of the user's own around
each execution qualifies by the rules above and wins; a TensorRT layer range never becomes the
iteration (layers are library ranges and are not executions).

**Per iteration** (one row per instance, per ``(pid, tid)`` sequence, in start order):

* ``cpu_ns``: the range's CPU duration;
* ``gpu_proj_ns``: first to last GPU op launched inside it (see ``nvtx.ranges``);
* ``end_ns`` (completion): max(range end, end of its GPU work);
* ``latency_ns``: range start -> completion. When the CPU runs ahead of the GPU this includes
  the time the work waited in the queue behind earlier iterations;
* ``period_ns``: completion minus the latest earlier completion in the same sequence (the time
  between consecutive completions: what gets faster when the program gets faster; 0 for an
  iteration whose work completed before an earlier one's, never negative, and a sequence's
  periods add up to the span of its completions); -1 here for a sequence's first iteration, which
  has none (the outputs show null, an empty CSV cell, "-": ``report.jsonout.no_sentinels``);
* ``queue_depth``: how many later iterations of the sequence the CPU had already started when this
  one completed (0: the loop waits for each iteration; 40: the CPU runs 40 iterations ahead);
* ``service_ns``: completion - max(start, latest earlier completion), at least 0: the time this
  iteration alone held the pipeline (= latency when iterations do not overlap, ~ period when they
  queue). Service times never overlap: their sum counts each nanosecond once.

**Warm-up**: per sequence, the leading iterations whose service time exceeds ``warmup_factor`` x the
median of the rest (at most half of them). Steady state = the remaining iterations; its window runs
from the first steady iteration's start to the last one's completion.

**Statistics** (steady state): ``period_*`` and ``latency_*`` (mean, std, min, max, p50/p90/p99);
``p50_ns``, ``mean_ns`` ... without a prefix are the headline iteration time: the period where a
sequence has two or more steady iterations and a period p50 above 0 (most instances completing
inside an earlier one's work say nothing about the loop: ``overlapping_instances`` counts them), else
the latency. ``throughput_per_s`` = 1 / mean
period (iterations per second per sequence). ``latency_includes_queueing`` is true when the CPU
runs ahead (median queue depth >= 1) and latency p50 exceeds the period p50 by 20% or more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import one_key
from nsysan.analyses.gpu import Window
from nsysan.analyses.libranges import library_of, xla_module
from nsysan.errors import UsageError

MIN_INSTANCES = 3
MIN_NS = 1_000
MIN_CPU_ONLY_NS = 10_000
COVERAGE_CLOSE = 0.8
MIN_COVERAGE = 0.25
QUEUEING_RATIO = 1.2
NEST_MIN = 0.75  # share of a range's instances inside another's for it to run inside it
REGULAR_MIN = 0.75  # share of the outer instances that hold the usual number of the inner range
MIN_OUTER = 5  # an outer range is the iteration over an inner one only when it repeats this often
MAX_SUBSTEPS = 12  # sub-step ranges shown per iteration (the most CPU time per iteration first)


@dataclass(frozen=True)
class Iterations:
    range_name: str | None
    how: str  # "option", "auto", "auto (CPU only: no GPU activity recorded)", "none"
    table: pd.DataFrame  # one row per iteration
    warmup: int
    steady: Window | None
    stats: dict[str, Any] = field(default_factory=dict)
    timed_regions: list[dict[str, object]] = field(default_factory=list)
    candidates: list[dict[str, Any]] = field(default_factory=list)
    why: str = ""
    # steps within steps: one row per iteration and sub-step range (index, pid, tid, name, count,
    # cpu_ns, gpu_ns), and one summary per other level (sub-steps, ranges that enclose iterations)
    substeps: pd.DataFrame = field(default_factory=pd.DataFrame)
    levels: list[dict[str, Any]] = field(default_factory=list)
    sequences: list[dict[str, Any]] = field(default_factory=list)  # per thread: its name, count, period


def steady_periods(table: pd.DataFrame) -> pd.DataFrame:
    """The steady iterations that have a period, each with the interval it owns: ``lo_ns`` (the
    previous completion) and ``hi_ns`` (its completion = start + latency), (lo, hi]. Per thread the
    intervals tile the time between its completions: what happened in one is that iteration's."""
    if len(table) == 0:
        return table.assign(lo_ns=pd.Series(dtype="int64"), hi_ns=pd.Series(dtype="int64"))
    st = table.loc[~table["warmup"].to_numpy(dtype=bool) & (table["period_ns"].to_numpy() >= 0)]
    hi = st["start_ns"].to_numpy(np.int64) + st["latency_ns"].to_numpy(np.int64)
    return st.assign(lo_ns=hi - st["period_ns"].to_numpy(np.int64), hi_ns=hi)


def _per_thread_max(rg: pd.DataFrame) -> pd.Series:
    return rg.groupby(["name", "pid", "tid"], sort=False).size().groupby(level="name", sort=False).max()


def _coverage(pids: np.ndarray, tids: np.ndarray, starts: np.ndarray, ends: np.ndarray,
              sums: Callable[[tuple[tuple[int, int], ...]], tuple[np.ndarray, np.ndarray]], owned_total: int,
              threads: Iterable[tuple[int, int]]) -> float:
    """Share of the GPU time (owned ops: their API start and duration) launched inside an instance of
    the range (its rows' pid, tid, start and end): on its thread, or on a thread of the same process
    that has no instance of the range (see the module doc). ``threads``: the threads that own ops;
    ``sums(keys)``: those threads' ops as (API starts in order, cumulative GPU time from 0)."""
    if owned_total <= 0:
        return 0.0
    covered = 0
    pairs = list(zip(pids.tolist(), tids.tolist()))
    seq_threads = set(pairs)
    first_of_pid: dict[int, int] = {}
    for p, t in sorted(seq_threads):
        first_of_pid.setdefault(p, t)
    rows_of: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(pairs):  # the instances per thread, in their order
        rows_of.setdefault(key, []).append(i)
    owning = list(threads)
    owns = set(owning)
    for (pid, tid), inst in rows_of.items():
        keys = [(pid, tid)] if (pid, tid) in owns else []
        if first_of_pid[pid] == tid:  # helper threads of the process: counted once, with its first sequence
            keys += [(p, t) for p, t in owning if p == pid and (p, t) not in seq_threads]
        if not keys:
            continue
        api, csum = sums(tuple(keys))
        # union of the instances (nested instances of the same name would count twice)
        us, ue = iv.merge(starts[inst], ends[inst])
        lo = np.searchsorted(api, us, side="left")
        hi = np.searchsorted(api, ue, side="right")
        covered += int((csum[hi] - csum[lo]).sum())
    return covered / owned_total


def _launch_sums(by_thread: dict[tuple[int, int], np.ndarray | slice], api_all: np.ndarray, st_all: np.ndarray,
                 en_all: np.ndarray) -> Callable[[tuple[tuple[int, int], ...]], tuple[np.ndarray, np.ndarray]]:
    """``sums(keys)`` for ``_coverage``: the ops of those threads by API start, and the running sum
    of their GPU time (``csum[i]``: the ops before the i-th), written in one array (no array of
    durations). A single thread's sums are kept for every range asked about (one thread's ops are
    asked for by every candidate: computed once, not once per range)."""
    kept: dict[tuple[tuple[int, int], ...], tuple[np.ndarray, np.ndarray]] = {}

    def sums(keys: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, np.ndarray]:
        got = kept.get(keys)
        if got is not None:
            return got
        parts = [by_thread[k] for k in keys]
        rows = np.concatenate(parts) if len(parts) > 1 else parts[0]
        api = api_all[rows]  # (a view when ``rows`` is every row)
        csum = np.empty(len(api) + 1, dtype=np.int64)
        csum[0] = 0
        np.subtract(en_all[rows], st_all[rows], out=csum[1:])
        if api.size > 1 and not bool((api[1:] >= api[:-1]).all()):  # (a thread's ops: in call order already)
            order = np.argsort(api, kind="stable")
            api, csum[1:] = api[order], csum[1:][order]
        np.cumsum(csum[1:], out=csum[1:])
        if len(keys) == 1:
            kept[keys] = (api, csum)
        return api, csum

    return sums


def _group_medians(values: np.ndarray, group: np.ndarray, cuts: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``np.median`` of each group's values (``values`` and ``group`` in group order, groups
    starting at ``cuts``, ``n`` rows each), as numpy computes it: the mean of the two middle values
    in float64, the middle one for an odd count."""
    v = values[np.lexsort((values, group))]
    lo, hi = v[cuts + (n - 1) // 2], v[cuts + n // 2]
    return (lo.astype(np.float64) + hi.astype(np.float64)) / 2


def _name_stats(col: dict[str, np.ndarray], order: np.ndarray, cuts: np.ndarray) -> dict[str, np.ndarray]:
    """Per name (the rows at ``order``, grouped from ``cuts``; at least one row): count, threads, total duration,
    GPU-launching rows, and the medians of latency (end, or the GPU work's projected end if later,
    less the start) and nesting depth; what ``candidates`` gave name by name."""
    n = np.diff(np.append(cuts, len(order)))
    group = np.repeat(np.arange(len(cuts)), n)
    gpu, start, end = col["gpu_ops"][order], col["start_ns"][order], col["end_ns"][order]
    lat = np.maximum(end, np.where(gpu > 0, col["proj_end_ns"][order], end)) - start
    depth = col["depth"][order]
    pid, tid = col["pid"][order].astype(np.int64), col["tid"][order].astype(np.int64)
    by_thread = np.lexsort((tid, pid, group))
    g3, p3, t3 = group[by_thread], pid[by_thread], tid[by_thread]
    new = np.concatenate([[True], (g3[1:] != g3[:-1]) | (p3[1:] != p3[:-1]) | (t3[1:] != t3[:-1])])
    return {"count": n, "threads": np.bincount(g3[new], minlength=len(cuts)),
            "total": np.add.reduceat(col["dur_ns"][order].astype(np.int64), cuts),
            "with_gpu": np.add.reduceat((gpu > 0).astype(np.int64), cuts),
            "median_lat": _group_medians(lat, group, cuts, n),
            "median_depth": (_group_medians(depth, group, cuts, n) if depth.dtype.kind in "iu" else
                             np.array([np.median(d) for d in np.split(depth, cuts[1:])], dtype=np.float64))}


@dataclass
class _Facts:
    """What ``_candidates`` learnt besides the list, for the nesting decisions and the levels: each
    considered name's rows in ``rg`` (positions, row order), the names that passed the basic tests
    (own range, repeated, GPU work, not sub-microsecond), the program's own repeated ranges with
    their median depth (GPU work or not: the levels shown), and the launch sums behind the coverages."""
    rows: dict[str, np.ndarray] = field(default_factory=dict)
    basic: set[str] = field(default_factory=set)
    repeated: dict[str, float] = field(default_factory=dict)  # own ranges repeated on a thread: median depth
    sums: Callable[[tuple[tuple[int, int], ...]], tuple[np.ndarray, np.ndarray]] | None = None
    by_thread: dict[tuple[int, int], np.ndarray | slice] = field(default_factory=dict)
    owned_total: int = 0
    cols: dict[str, np.ndarray] = field(default_factory=dict)  # rg's int64 columns (``_instances``)


def candidates(rg: pd.DataFrame, owned: pd.DataFrame | None = None, *,
               gpu_recorded: bool = True) -> list[dict[str, Any]]:
    """Every repeated range, with the facts the choice is made on and a verdict: ``"chosen"`` is
    decided by ``pick_range``; the others say why they were rejected."""
    return _candidates(rg, owned, gpu_recorded=gpu_recorded)[0]


def _candidates(rg: pd.DataFrame, owned: pd.DataFrame | None = None, *,
                gpu_recorded: bool = True) -> tuple[list[dict[str, Any]], _Facts]:
    facts = _Facts()
    if len(rg) == 0:
        return [], facts
    per_thread = _per_thread_max(rg)
    names = per_thread.loc[per_thread >= 2].index.tolist()
    if not names:
        return [], facts
    owned = owned if owned is not None else pd.DataFrame(columns=["pid", "tid", "api_start_ns", "start_ns", "end_ns"])
    owned_total = int((owned["end_ns"] - owned["start_ns"]).sum()) if len(owned) else 0
    by_thread: dict[tuple[int, int], np.ndarray | slice] = {}
    api_all = st_all = en_all = np.zeros(0, dtype=np.int64)
    if len(owned):
        only = one_key(owned["pid"].to_numpy(), owned["tid"].to_numpy())
        if only is not None:
            by_thread[only] = slice(None)  # one thread: every row, no positions
        else:
            for key, idx in owned.groupby(["pid", "tid"], sort=False).indices.items():
                by_thread[(int(key[0]), int(key[1]))] = idx
        api_all = owned["api_start_ns"].to_numpy()
        st_all, en_all = owned["start_ns"].to_numpy(), owned["end_ns"].to_numpy()
    sums = _launch_sums(by_thread, api_all, st_all, en_all)
    # each name's rows (in their order) from one stable sort of the name codes: no frame per name
    codes, uniq = pd.factorize(rg["name"])
    order = np.argsort(codes, kind="stable")
    sc = codes[order]
    cuts = np.flatnonzero(np.concatenate([[True], sc[1:] != sc[:-1]]))
    ends_at = np.append(cuts[1:], len(order))
    uniq_list = uniq.tolist()
    group_of = {uniq_list[code]: j for j, code in enumerate(sc[cuts].tolist()) if code >= 0}  # name -> group
    col = {c: rg[c].to_numpy() for c in ("pid", "tid", "start_ns", "end_ns", "dur_ns", "gpu_ops", "proj_end_ns",
                                         "depth")}
    stats = _name_stats(col, order, cuts)  # every name's numbers at once (one Python loop of names only)
    dom_vals = rg["domain"].array if "domain" in rg.columns else None
    dom_ok = ~np.asarray(pd.isna(dom_vals), dtype=bool) if dom_vals is not None else None
    first_domain = {}
    if dom_ok is not None:  # each name's first row (in row order) with a domain
        hits = np.flatnonzero(dom_ok[order])
        groups = np.searchsorted(cuts, hits, side="right") - 1
        firsts = np.flatnonzero(np.concatenate([[True], groups[1:] != groups[:-1]])) if len(hits) else hits
        first_domain = dict(zip(groups[firsts].tolist(), order[hits[firsts]].tolist()))
    out: list[dict[str, Any]] = []
    for name in sorted(names):  # what a group-by on the name, sorted, visits
        j = group_of[name]
        g = order[cuts[j]:ends_at[j]]  # the name's rows, in row order
        domain = str(dom_vals[first_domain[j]]) if j in first_domain else None
        lib = library_of(str(name), domain)
        with_gpu = int(stats["with_gpu"][j]) / int(stats["count"][j])
        c = {"name": str(name), "count": int(stats["count"][j]), "per_thread_max": int(per_thread[name]),
             "threads": int(stats["threads"][j]),
             "median_ns": int(stats["median_lat"][j]), "total_ns": int(stats["total"][j]),
             "depth": float(stats["median_depth"][j]), "with_gpu_frac": round(with_gpu, 4),
             "gpu_coverage": 0.0, "library": lib, "verdict": ""}
        basic = (c["per_thread_max"] >= MIN_INSTANCES and not (gpu_recorded and with_gpu < 0.5)
                 and c["median_ns"] >= (MIN_NS if gpu_recorded else MIN_CPU_ONLY_NS))
        if lib is not None:
            c["verdict"] = f"library range ({lib})"
        elif c["per_thread_max"] < MIN_INSTANCES:
            c["verdict"] = f"repeats fewer than {MIN_INSTANCES} times on one thread"
        elif gpu_recorded and with_gpu < 0.5:
            c["verdict"] = "no GPU work launched below it"
        elif c["median_ns"] < (MIN_NS if gpu_recorded else MIN_CPU_ONLY_NS):
            c["verdict"] = "shorter than 1 us" if gpu_recorded else "shorter than 10 us (CPU only)"
        if lib is None and c["per_thread_max"] >= MIN_INSTANCES:  # a level of the loop, GPU work or not
            facts.rows[c["name"]] = g
            facts.repeated[c["name"]] = c["depth"]
        if basic and (lib is None or (lib == "XLA" and xla_module(str(name), domain))):
            facts.rows[c["name"]] = g
            if lib is None:
                facts.basic.add(c["name"])
            if gpu_recorded:  # (an XLA module's too: the fallback when no range of the program's own qualifies)
                c["gpu_coverage"] = round(_coverage(col["pid"][g], col["tid"][g], col["start_ns"][g],
                                                    col["end_ns"][g], sums, owned_total, by_thread), 6)
        out.append(c)
    facts.sums, facts.by_thread, facts.owned_total = sums, by_thread, owned_total
    return out, facts


def pick_range(rg: pd.DataFrame, name: str | None, owned: pd.DataFrame | None = None, *,
               gpu_recorded: bool = True) -> tuple[str | None, str, list[dict[str, Any]]]:
    """(range label, how, candidates). A ``name`` that matches no range raises ``UsageError``."""
    return _pick(rg, name, owned, gpu_recorded=gpu_recorded)[:3]


def _pick(rg: pd.DataFrame, name: str | None, owned: pd.DataFrame | None = None, *,
          gpu_recorded: bool = True) -> tuple[str | None, str, list[dict[str, Any]], _Facts]:
    cands, facts = _candidates(rg, owned, gpu_recorded=gpu_recorded)
    if name is not None:
        labels = set(rg["name"].astype(str)) if len(rg) else set()
        if name in labels:
            chosen = name
        else:
            by_text = sorted({lab for lab in labels if lab.split(":", 1)[-1] == name})
            if len(by_text) != 1:
                shown = [c["name"] for c in sorted(cands, key=lambda c: -c["count"]) if not c["library"]][:8]
                raise UsageError(
                    f"--iteration-range {name!r} matches no closed NVTX range in this trace"
                    + (f" (it matches several: {', '.join(by_text)})" if by_text else ""),
                    hint=("candidates: " + ", ".join(repr(s) for s in shown)) if shown else
                    "this trace has no repeated NVTX range")
            chosen = by_text[0]
        for c in cands:
            if c["name"] == chosen:
                c["verdict"] = "chosen (option)"
        return chosen, "option", cands, facts
    ok = [c for c in cands if not c["verdict"]]
    if gpu_recorded:
        best = max((c["gpu_coverage"] for c in ok), default=0.0)
        if best < MIN_COVERAGE:
            for c in ok:
                c["verdict"] = (f"launched {c['gpu_coverage']:.0%} of the GPU time (an iteration launches at "
                                f"least {MIN_COVERAGE:.0%})")
            return (*_fallback(rg, cands, gpu_recorded=gpu_recorded), facts)
        for c in ok:
            if c["gpu_coverage"] < COVERAGE_CLOSE * best:
                c["verdict"] = f"covers {c['gpu_coverage']:.0%} of the GPU time (best {best:.0%})"
        ok = [c for c in ok if not c["verdict"]]
    if not ok:
        return (*_fallback(rg, cands, gpu_recorded=gpu_recorded), facts)
    ok = _outer_or_inner(ok, rg, facts)
    ok.sort(key=lambda c: (-c["per_thread_max"], c["depth"], -c["total_ns"], c["name"]))
    for c in ok[1:]:
        c["verdict"] = (f"fewer instances than {ok[0]['name']!r} ({c['per_thread_max']} vs {ok[0]['per_thread_max']} "
                        "on one thread), which launches as much of the GPU work")
    ok[0]["verdict"] = "chosen"
    how = "auto" if gpu_recorded else "auto (CPU only: no GPU activity recorded)"
    return ok[0]["name"], how, cands, facts


@dataclass(frozen=True)
class _Inst:
    """One name's instances that enclose no other instance of that name on their thread (``leaves``)."""
    pid: np.ndarray
    tid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    dur: np.ndarray
    per_thread_max: int


def _instances(rg: pd.DataFrame, rows: np.ndarray, facts: _Facts) -> _Inst:
    if not facts.cols:  # the columns as int64 arrays, and the push/pop flags: once per trace
        facts.cols = {c: rg[c].to_numpy().astype(np.int64, copy=False) for c in ("pid", "tid", "start_ns", "end_ns")}
        facts.cols["pushpop"] = _pushpop(rg)
    col = facts.cols
    pid, tid, start, end = col["pid"][rows], col["tid"][rows], col["start_ns"][rows], col["end_ns"][rows]
    keep = ~(encloses_same(pid, tid, start, end) & col["pushpop"][rows])
    pid, tid, start, end = pid[keep], tid[keep], start[keep], end[keep]
    per = max((len(ix) for ix in _thread_rows(pid, tid, start).values()), default=0)
    return _Inst(pid, tid, start, end, end - start, per)


def _pushpop(rg: pd.DataFrame) -> np.ndarray:
    """Which rows are push/pop ranges (nested properly on their thread: one around another of its
    name is a region around it). Start/end ranges may overlap at will (concurrent requests): a long
    one that happens to span a short one is not set aside, unless its name is also pushed and
    popped (a start/end instance around push/pop ones of its name is a region too, never an
    iteration that makes the ones inside it look instant). Without a style column: all."""
    if "style" not in rg.columns:
        return np.ones(len(rg), dtype=bool)
    pp = np.asarray((rg["style"] == "PushPop").to_numpy(), dtype=bool)
    if pp.any() and not pp.all() and "name" in rg.columns:
        names = rg["name"].to_numpy()
        pushed = pd.unique(names[pp])
        pp = pp | np.asarray(pd.Series(names).isin(pushed).to_numpy(), dtype=bool)
    return pp


def _thread_rows(pid: np.ndarray, tid: np.ndarray, start: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """Each thread's row positions, in start order (one sort; a Python step per thread, not per row)."""
    if len(pid) == 0:
        return {}
    order = np.lexsort((start, tid, pid))
    p, t = pid[order], tid[order]
    cuts = np.flatnonzero(np.concatenate([[True], (p[1:] != p[:-1]) | (t[1:] != t[:-1])]))
    bounds = np.append(cuts, len(order)).tolist()
    return {(int(p[a]), int(t[a])): order[a:b] for a, b in zip(bounds[:-1], bounds[1:])}


def encloses_same(pid: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per instance of one range name: True when it encloses another instance of the same name on
    its thread (start <= other's start, other's end <= end; of two identical instances, the first
    in start order). Per thread, instances by start (longest first): the ones that start inside
    instance i are the next ones up to the first start after its end, and i encloses one of them
    when their smallest end is at most its end."""
    n = len(start)
    out = np.zeros(n, dtype=bool)
    if n < 2:
        return out
    order = np.lexsort((-end, start, tid, pid))
    p, t = pid[order], tid[order]
    cuts = np.flatnonzero(np.concatenate([[True], (p[1:] != p[:-1]) | (t[1:] != t[:-1])]))
    bounds = np.append(cuts, n)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):  # one pass per thread
        if b - a < 2:
            continue
        s, e = start[order[a:b]], end[order[a:b]]
        lo = np.arange(1, b - a + 1)
        hi = np.searchsorted(s, e, side="right")
        q = np.flatnonzero(hi > lo)
        if q.size:
            mn, _ = iv.min_max_over(e, e, lo[q], hi[q])
            out[order[a:b][q[mn <= e[q]]]] = True
    return out


def _holder(outer: _Inst, inner: _Inst) -> np.ndarray:
    """Per inner instance: the position of the outer instance of its thread that holds it (the
    latest one starting at or before it, if it ends at or after it), -1 where none does."""
    res = np.full(len(inner.start), -1, dtype=np.int64)
    if len(outer.start) == 0 or len(inner.start) == 0:
        return res
    o_groups = _thread_rows(outer.pid, outer.tid, outer.start)
    for key, ii in _thread_rows(inner.pid, inner.tid, inner.start).items():
        oi = o_groups.get(key)
        if oi is None:
            continue
        k = np.searchsorted(outer.start[oi], inner.start[ii], side="right") - 1
        ok = k >= 0
        held = np.zeros(len(ii), dtype=bool)
        held[ok] = inner.end[ii[ok]] <= outer.end[oi[k[ok]]]
        res[ii[held]] = oi[k[held]]
    return res


def _nest(outer: _Inst, inner: _Inst) -> tuple[int, bool] | None:
    """(usual number of inner instances per outer one, whether that number is regular) when the
    inner range runs inside the outer one (``NEST_MIN`` of its instances), else None."""
    if len(inner.start) == 0 or len(outer.start) == 0:
        return None
    h = _holder(outer, inner)
    if float((h >= 0).mean()) < NEST_MIN:
        return None
    per = np.bincount(h[h >= 0], minlength=len(outer.start))
    vals, cnt = np.unique(per[per > 0], return_counts=True)
    if not len(vals):
        return None
    k = int(vals[np.argmax(cnt)])
    return k, bool(float((per == k).mean()) >= REGULAR_MIN)


def _outer_or_inner(ok: list[dict[str, Any]], rg: pd.DataFrame, facts: _Facts) -> list[dict[str, Any]]:
    """Steps within steps (see the module doc): of two qualifying ranges one of which runs inside the
    other, the outer one is the iteration when it holds the same number k >= 2 of the inner one each
    time (k micro-batches per optimizer step, L layers per step) and repeats at least ``MIN_OUTER``
    times on a thread: the inner one is its breakdown, dropped here with a verdict that says so.
    Otherwise (a varying number: tokens of requests of different lengths, the steps of partial
    epochs; or few outer instances) both are left to the usual order, where the inner one, repeated
    more often, wins."""
    if len(ok) < 2:
        return ok
    inst = {c["name"]: _instances(rg, facts.rows[c["name"]], facts) for c in ok if c["name"] in facts.rows}
    rel: dict[tuple[str, str], tuple[int, bool]] = {}
    for p in inst:
        for c in inst:
            if p != c:
                r = _nest(inst[p], inst[c])
                if r is not None:
                    rel[(p, c)] = r
    why: dict[str, str] = {}
    for (p, c), (k, regular) in sorted(rel.items()):
        if (c, p) in rel or k <= 1:  # the same extents, or one inner per outer: left to the usual order
            continue
        if regular and inst[p].per_thread_max >= MIN_OUTER:
            why.setdefault(c, f"a sub-step of {p!r} ({k} per {p!r}): the loop repeats {p!r}, this is its breakdown")
        # else the inner range, repeated more often, wins in the usual order ("fewer instances than ...")
    left = [c for c in ok if c["name"] not in why]
    if not left:
        return ok
    for c in ok:
        if c["name"] in why:
            c["verdict"] = why[c["name"]]
    return left


XLA_HOW = "auto (XLA module executions: no range of the program's own qualified)"


def _fallback(rg: pd.DataFrame, cands: list[dict[str, Any]], *,
              gpu_recorded: bool) -> tuple[str | None, str, list[dict[str, Any]]]:
    """When no range of the program's own qualifies: the executions of a jitted XLA module
    (``XlaModule:#hlo_module=...#``, when JAX's or TensorFlow's own ranges are missing or lost
    their names), else TensorRT engine executions."""
    mods = [c for c in cands if c["library"] == "XLA" and c["gpu_coverage"] >= MIN_COVERAGE]
    if mods:
        best = max(c["gpu_coverage"] for c in mods)
        mods = sorted((c for c in mods if c["gpu_coverage"] >= COVERAGE_CLOSE * best),
                      key=lambda c: (-c["per_thread_max"], -c["total_ns"], c["name"]))
        mods[0]["verdict"] = "chosen (XLA module executions: no range of the program's own qualified)"
        return mods[0]["name"], XLA_HOW, cands
    return _tensorrt_fallback(rg, cands, gpu_recorded=gpu_recorded)


TENSORRT_HOW = "auto (TensorRT engine executions: no range of the program's own qualified)"


def _tensorrt_fallback(rg: pd.DataFrame, cands: list[dict[str, Any]], *,
                       gpu_recorded: bool) -> tuple[str | None, str, list[dict[str, Any]]]:
    """The fallback when no range of the program's own qualifies: TensorRT engine executions
    (``tensorrt.execution_rows``: ``ExecutionContext::execute``/``enqueue`` ranges, never a layer
    range), one execution = one iteration, even a single one. The execution label with the most
    instances is taken (then the larger total). Where GPU activity was recorded, at least half of
    its instances must have launched GPU work (an ``enqueueV3`` captured into a CUDA Graph launches
    none: its replays are not executions). Otherwise there is no iteration, as before."""
    from nsysan.analyses.tensorrt import execution_rows

    if len(rg) == 0:
        return None, "none", cands
    ex = rg.loc[execution_rows(rg)]
    if len(ex) == 0:
        return None, "none", cands
    per = ex.groupby("name", sort=True).agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum"),
                                           with_gpu=("gpu_ops", lambda g: float((g > 0).mean())))
    if gpu_recorded:
        per = per.loc[per["with_gpu"] >= 0.5]
    if len(per) == 0:
        return None, "none", cands
    per = per.reset_index().sort_values(["count", "total_ns", "name"], ascending=[False, False, True], kind="stable")
    chosen = str(per["name"].iloc[0])
    verdict = "chosen (TensorRT engine executions: no range of the program's own qualified)"
    for c in cands:
        if c["name"] == chosen:
            c["verdict"] = verdict
            break
    else:
        g = ex.loc[ex["name"] == chosen]
        cands.append({"name": chosen, "count": int(len(g)),
                      "per_thread_max": int(g.groupby(["pid", "tid"]).size().max()),
                      "threads": int(g[["pid", "tid"]].drop_duplicates().shape[0]),
                      "median_ns": int(np.median(g["dur_ns"].to_numpy())), "total_ns": int(g["dur_ns"].sum()),
                      "depth": float(np.median(g["depth"].to_numpy())),
                      "with_gpu_frac": round(float((g["gpu_ops"].to_numpy() > 0).mean()), 4),
                      "gpu_coverage": 0.0, "library": "TensorRT", "verdict": verdict})
    return chosen, TENSORRT_HOW, cands


def _stats(values: np.ndarray, prefix: str) -> dict[str, int]:
    if values.size == 0:
        return {}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {f"{prefix}mean_ns": int(round(float(values.mean()))),
            f"{prefix}std_ns": int(round(float(values.std(ddof=1)))) if values.size > 1 else 0,
            f"{prefix}min_ns": int(values.min()), f"{prefix}max_ns": int(values.max()),
            f"{prefix}p50_ns": int(round(float(p50))), f"{prefix}p90_ns": int(round(float(p90))),
            f"{prefix}p99_ns": int(round(float(p99)))}


def _sequence_columns(it: pd.DataFrame, warmup_factor: float) -> pd.DataFrame:
    """period, queue depth, service time and warm-up of one (pid, tid) sequence sorted by start."""
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


def iterations(rg: pd.DataFrame, *, name: str | None = None, warmup_factor: float = 1.5,
               owned: pd.DataFrame | None = None, gpu_recorded: bool = True,
               threads: pd.DataFrame | None = None) -> Iterations:
    """The iteration model (module doc). ``threads``: the trace's thread table (``global_tid``,
    ``name``), to name each sequence by its thread."""
    timed = rg.loc[rg["name"].str.contains("Total Elapsed Time", regex=False)] if len(rg) else rg
    regions = [{"name": str(r["name"]), "start_ns": int(r["start_ns"]), "end_ns": int(r["end_ns"]),
                "cpu_ns": int(r["dur_ns"]),
                "with_gpu_ns": int(max(r["end_ns"], r["proj_end_ns"]) - r["start_ns"])} for _, r in timed.iterrows()]
    chosen, how, cands, facts = _pick(rg, name, owned, gpu_recorded=gpu_recorded)
    if chosen is None:
        why = ("no repeated NVTX range of the program's own launched the GPU work: the whole capture is judged"
               if cands else "no repeated NVTX range in this trace: the whole capture is judged")
        return Iterations(None, how, pd.DataFrame(), 0, None, {}, regions, cands, why)
    it = rg.loc[rg["name"] == chosen]
    # an instance around later instances of itself (an outer 'train_step' around the next 14) is a
    # region that encloses iterations, not one: the innermost instances are the iterations
    outer = encloses_same(it["pid"].to_numpy().astype(np.int64), it["tid"].to_numpy().astype(np.int64),
                          it["start_ns"].to_numpy().astype(np.int64),
                          it["end_ns"].to_numpy().astype(np.int64)) & _pushpop(it)
    enclosing = int(outer.sum())
    if enclosing:
        it = it.loc[~outer]
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
    parts = [_sequence_columns(g.reset_index(drop=True), warmup_factor)
             for _, g in table.groupby(["pid", "tid"], sort=True)]
    table = pd.concat(parts, ignore_index=True).sort_values(["start_ns", "pid", "tid"], kind="stable")
    table = table.reset_index(drop=True).assign(index=np.arange(len(table)))
    warm = int(table["warmup"].sum())
    steady = table.loc[~table["warmup"]]
    win = Window(int(steady["start_ns"].min()), int(steady["end_ns"].max()), "steady state") if len(steady) else None
    stats = _iteration_stats(table, steady, len(parts), enclosing, warm)
    why = _why_chosen(chosen, how, cands, len(table), gpu_recorded)
    if enclosing:
        why += (f"; {enclosing} instance(s) of it enclosing later ones of the same name on their thread are "
                "regions around iterations, not iterations: the innermost instances are")
    substeps, levels = _levels(table, rg, chosen, facts)
    return Iterations(chosen, how, table, warm, win, stats, regions, cands, why, substeps, levels,
                      _sequences(table, threads))


def _iteration_stats(table: pd.DataFrame, steady: pd.DataFrame, sequences: int, enclosing: int,
                     warm: int) -> dict[str, Any]:
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
    return stats


def _why_chosen(chosen: str, how: str, cands: list[dict[str, Any]], n: int, gpu_recorded: bool) -> str:
    """Why ``chosen`` is the iteration (``how`` it was picked; ``n``: its instances)."""
    if how == "option":
        why = f"'{chosen}', as asked (--iteration-range)"
    elif how == XLA_HOW:
        c = next(c for c in cands if c["name"] == chosen)
        why = (f"'{chosen}': each execution of this jitted XLA module is one iteration ({n} executions, "
               f"{c['gpu_coverage']:.0%} of the GPU time), as no NVTX range of the program's own qualified")
    elif how == TENSORRT_HOW:
        why = (f"'{chosen}': each TensorRT engine execution is one iteration ({n} executions), as no "
               f"NVTX range of the program's own qualified")
    else:
        c = next(c for c in cands if c["name"] == chosen)
        subs = [x["name"] for x in cands if x["verdict"].startswith(f"a sub-step of {chosen!r}")]
        why = (f"'{chosen}': the most repeated range of the program's own that launched "
               f"{c['gpu_coverage']:.0%} of the GPU time" if gpu_recorded else
               f"'{chosen}': the most repeated range of the program's own (no GPU activity was recorded)")
        if subs:
            why = (f"'{chosen}': the unit the loop repeats, with the same number of "
                   + ", ".join(f"'{x}'" for x in subs) + " inside each (its sub-steps, a finer breakdown, not the "
                   f"iteration), launching {c['gpu_coverage']:.0%} of the GPU time")
    return why


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
