"""Which NVTX range is one iteration: the candidates, the facts each is judged on, the choice and its
fallbacks (XLA module executions, TensorRT engine executions). The model: ``iterations/__init__``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import one_key
from nsysan.analyses.iterations.facts import _Facts
from nsysan.analyses.iterations.nesting import _outer_or_inner
from nsysan.analyses.iterations.values import MIN_COVERAGE, MIN_INSTANCES, Candidate, Choice, Reason, Rejection, decide
from nsysan.analyses.libranges import library_of, xla_module
from nsysan.analyses.recorder_ranges import added_by_recorder
from nsysan.errors import UsageError

MIN_NS = 1_000
MIN_CPU_ONLY_NS = 10_000
COVERAGE_CLOSE = 0.8


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
        # (several threads: positions each; a slice only stands for the one thread's every row)
        rows = np.concatenate(cast(list[np.ndarray], parts)) if len(parts) > 1 else parts[0]
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


def candidates(rg: pd.DataFrame, owned: pd.DataFrame | None = None, *,
               gpu_recorded: bool = True) -> list[Candidate]:
    """Every repeated range, with the facts the choice is made on, rejected where it cannot be an
    iteration whatever the others are (a library's, too few repeats, no GPU work, too short); the
    choice among the rest is ``pick_range``'s."""
    return _candidates(rg, owned, gpu_recorded=gpu_recorded)[0]


def _candidates(rg: pd.DataFrame, owned: pd.DataFrame | None = None, *,
                gpu_recorded: bool = True) -> tuple[list[Candidate], _Facts]:
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
            by_thread[cast(tuple[int, int], only)] = slice(None)  # one thread (a pid, tid pair): every row
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
    out: list[Candidate] = []
    for name in sorted(names):  # what a group-by on the name, sorted, visits
        j = group_of[name]
        g = order[cuts[j]:ends_at[j]]  # the name's rows, in row order
        domain = str(dom_vals[first_domain[j]]) if dom_vals is not None and j in first_domain else None
        lib = library_of(str(name), domain)
        with_gpu = int(stats["with_gpu"][j]) / int(stats["count"][j])
        n, med = int(per_thread[name]), int(stats["median_lat"][j])
        short = _shortfall(n, with_gpu, med, gpu_recorded)
        if lib is None and n >= MIN_INSTANCES:  # a level of the loop, GPU work or not
            facts.rows[str(name)] = g
            facts.repeated[str(name)] = float(stats["median_depth"][j])
        coverage = 0.0
        if short is None and (lib is None or (lib == "XLA" and xla_module(str(name), domain))):
            facts.rows[str(name)] = g
            if lib is None:
                facts.basic.add(str(name))
            if gpu_recorded:  # (an XLA module's too: the fallback when no range of the program's own qualifies)
                coverage = round(_coverage(col["pid"][g], col["tid"][g], col["start_ns"][g], col["end_ns"][g], sums,
                                           owned_total, by_thread), 6)
        out.append(Candidate(name=str(name), count=int(stats["count"][j]), per_thread_max=n,
                             threads=int(stats["threads"][j]), median_ns=med, total_ns=int(stats["total"][j]),
                             depth=float(stats["median_depth"][j]), with_gpu_frac=round(with_gpu, 4),
                             gpu_coverage=coverage, library=lib, recorder=added_by_recorder(domain),
                             rejected=Rejection(Reason.LIBRARY, library=lib) if lib is not None else short))
    facts.sums, facts.by_thread, facts.owned_total = sums, by_thread, owned_total
    return out, facts


def _shortfall(per_thread_max: int, with_gpu: float, median_ns: int, gpu_recorded: bool) -> Rejection | None:
    """Why a range cannot be an iteration whatever the others are (too few repeats on a thread, no
    GPU work below most instances, too short), or None."""
    if per_thread_max < MIN_INSTANCES:
        return Rejection(Reason.FEW_REPEATS)
    if gpu_recorded and with_gpu < 0.5:
        return Rejection(Reason.NO_GPU_WORK)
    if median_ns < (MIN_NS if gpu_recorded else MIN_CPU_ONLY_NS):
        return Rejection(Reason.TOO_SHORT, cpu_only=not gpu_recorded)
    return None


def pick_range(rg: pd.DataFrame, name: str | None, owned: pd.DataFrame | None = None, *,
               gpu_recorded: bool = True) -> tuple[str | None, str, list[Candidate]]:
    """(range label, how, candidates). A ``name`` that matches no range raises ``UsageError``."""
    return _pick(rg, name, owned, gpu_recorded=gpu_recorded)[:3]


def _pick(rg: pd.DataFrame, name: str | None, owned: pd.DataFrame | None = None, *,
          gpu_recorded: bool = True) -> tuple[str | None, str, list[Candidate], _Facts]:
    cands, facts = _candidates(rg, owned, gpu_recorded=gpu_recorded)
    if name is not None:
        chosen = _named(rg, name, cands)
        return chosen, "option", decide(cands, {}, {chosen: Choice.OPTION}), facts
    ok = [c for c in cands if c.undecided]
    rejected: dict[str, Rejection] = {}
    if any(not c.recorder for c in ok) and any(c.recorder for c in ok):
        # the ranges nsysan profile --annotate added are the iteration only where the program has none
        rejected.update((c.name, Rejection(Reason.RECORDER)) for c in ok if c.recorder)
        ok = [c for c in ok if not c.recorder]
    if gpu_recorded:
        best = max((c.gpu_coverage for c in ok), default=0.0)
        if best < MIN_COVERAGE:
            rejected.update((c.name, Rejection(Reason.LOW_COVERAGE, coverage=c.gpu_coverage)) for c in ok)
            return (*_fallback(rg, decide(cands, rejected), gpu_recorded=gpu_recorded), facts)
        rejected.update((c.name, Rejection(Reason.BELOW_BEST, coverage=c.gpu_coverage, best=best))
                        for c in ok if c.gpu_coverage < COVERAGE_CLOSE * best)
        ok = [c for c in ok if c.name not in rejected]
    if not ok:
        return (*_fallback(rg, decide(cands, rejected), gpu_recorded=gpu_recorded), facts)
    ok, substeps = _outer_or_inner(ok, rg, facts)
    rejected.update(substeps)
    ok.sort(key=lambda c: (-c.per_thread_max, c.depth, -c.total_ns, c.name))
    rejected.update((c.name, Rejection(Reason.FEWER_INSTANCES, other=ok[0].name, mine=c.per_thread_max,
                                       theirs=ok[0].per_thread_max)) for c in ok[1:])
    how = "auto" if gpu_recorded else "auto (CPU only: no GPU activity recorded)"
    return ok[0].name, how, decide(cands, rejected, {ok[0].name: Choice.AUTO}), facts


def _named(rg: pd.DataFrame, name: str, cands: list[Candidate]) -> str:
    """The range ``--iteration-range`` names: its label, or the one label whose text after the
    domain's "domain:" is ``name``; else ``UsageError`` listing the candidates."""
    labels = set(rg["name"].astype(str)) if len(rg) else set()
    if name in labels:
        return name
    by_text = sorted({lab for lab in labels if lab.split(":", 1)[-1] == name})
    if len(by_text) != 1:
        shown = [c.name for c in sorted(cands, key=lambda c: -c.count) if not c.library][:8]
        raise UsageError(
            f"--iteration-range {name!r} matches no closed NVTX range in this trace"
            + (f" (it matches several: {', '.join(by_text)})" if by_text else ""),
            hint=("candidates: " + ", ".join(repr(s) for s in shown)) if shown else
            "this trace has no repeated NVTX range")
    return by_text[0]


XLA_HOW = "auto (XLA module executions: no range of the program's own qualified)"


def _fallback(rg: pd.DataFrame, cands: list[Candidate], *,
              gpu_recorded: bool) -> tuple[str | None, str, list[Candidate]]:
    """When no range of the program's own qualifies: the executions of a jitted XLA module
    (``XlaModule:#hlo_module=...#``, when JAX's or TensorFlow's own ranges are missing or lost
    their names), else TensorRT engine executions."""
    mods = [c for c in cands if c.library == "XLA" and c.gpu_coverage >= MIN_COVERAGE]
    if mods:
        best = max(c.gpu_coverage for c in mods)
        mods = sorted((c for c in mods if c.gpu_coverage >= COVERAGE_CLOSE * best),
                      key=lambda c: (-c.per_thread_max, -c.total_ns, c.name))
        return mods[0].name, XLA_HOW, decide(cands, {}, {mods[0].name: Choice.XLA})
    return _tensorrt_fallback(rg, cands, gpu_recorded=gpu_recorded)


TENSORRT_HOW = "auto (TensorRT engine executions: no range of the program's own qualified)"


def _tensorrt_fallback(rg: pd.DataFrame, cands: list[Candidate], *,
                       gpu_recorded: bool) -> tuple[str | None, str, list[Candidate]]:
    """The fallback when no range of the program's own qualifies: TensorRT engine executions
    (``tensorrt.execution_rows``: ``ExecutionContext::execute``/``enqueue`` ranges, never a layer
    range), one execution = one iteration, even a single one. The execution label with the most
    instances is taken (then the larger total). Where GPU activity was recorded, at least half of
    its instances must have launched GPU work (an ``enqueueV3`` captured into a CUDA Graph launches
    none: its replays are not executions). Otherwise there is no iteration, as before."""
    from nsysan.analyses.tensorrt_ranges import execution_rows

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
    if not any(c.name == chosen for c in cands):  # (an execution that repeats on no thread)
        g = ex.loc[ex["name"] == chosen]
        cands = [*cands, Candidate(
            name=chosen, count=int(len(g)), per_thread_max=int(g.groupby(["pid", "tid"]).size().max()),
            threads=int(g[["pid", "tid"]].drop_duplicates().shape[0]), median_ns=int(np.median(g["dur_ns"].to_numpy())),
            total_ns=int(g["dur_ns"].sum()), depth=float(np.median(g["depth"].to_numpy())),
            with_gpu_frac=round(float((g["gpu_ops"].to_numpy() > 0).mean()), 4), gpu_coverage=0.0,
            library="TensorRT", recorder=None)]
    return chosen, TENSORRT_HOW, decide(cands, {}, {chosen: Choice.TENSORRT})


def _why_chosen(chosen: str, how: str, cands: list[Candidate], n: int, gpu_recorded: bool) -> str:
    """Why ``chosen`` is the iteration (``how`` it was picked; ``n``: its instances)."""
    if how == "option":
        why = f"'{chosen}', as asked (--iteration-range)"
    elif how == XLA_HOW:
        c = next(c for c in cands if c.name == chosen)
        why = (f"'{chosen}': each execution of this jitted XLA module is one iteration ({n} executions, "
               f"{c.gpu_coverage:.0%} of the GPU time), as no NVTX range of the program's own qualified")
    elif how == TENSORRT_HOW:
        why = (f"'{chosen}': each TensorRT engine execution is one iteration ({n} executions), as no "
               f"NVTX range of the program's own qualified")
    else:
        c = next(c for c in cands if c.name == chosen)
        subs = [x.name for x in cands if x.substep_of(chosen)]
        why = (f"'{chosen}': the most repeated of the ranges the recorder added (nsysan profile --annotate; not "
               f"written in the program), launching {c.gpu_coverage:.0%} of the GPU time" if c.recorder else
               f"'{chosen}': the most repeated range of the program's own that launched "
               f"{c.gpu_coverage:.0%} of the GPU time" if gpu_recorded else
               f"'{chosen}': the most repeated range of the program's own (no GPU activity was recorded)")
        if subs:
            why = (f"'{chosen}': the unit the loop repeats, with the same number of "
                   + ", ".join(f"'{x}'" for x in subs) + " inside each (its sub-steps, a finer breakdown, not the "
                   f"iteration), launching {c.gpu_coverage:.0%} of the GPU time")
    return why
