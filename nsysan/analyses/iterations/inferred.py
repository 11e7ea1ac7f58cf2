"""Iterations inferred from the GPU work itself, for programs with no NVTX range of their own that repeats.

Most traces arrive without annotations (a plain training script, Lightning, the Hugging Face Trainer,
JAX, a serving loop). Their loop is still in the trace: the launching thread issues the same sequence
of GPU operations once per step. This module finds that unit.

**The launch stream.** Per process, one symbol per launch (a kernel's name, a copy's kind, a memset,
a CUDA Graph launch; the nodes of one graph launch share its correlation id and count once), in the
order the CPU issued them. Threads of one process that take turns (PyTorch's autograd thread
launches the backward pass while the main thread waits) are one stream; threads that launch side by
side, each its own loop (worker threads, several execution contexts), are inferred one by one:
whichever reading holds more GPU time in alike iterations wins (``_loops``).

**The anchor.** Every symbol issued at least ``MIN_REPEATS`` times cuts the stream into segments,
one from each occurrence to the next. A symbol issued once per step cuts it into steps, and steps
look alike: the same operations in the same numbers. The score of a symbol is the share of the stream
between its first and last occurrence held by segments of the most common composition (an order-free
64-bit hash of the segment's symbols, exact), or, at 0.9 of the weight, by segments within 25% of the
median length (steps whose shapes vary use other kernel variants in the same number), discounted for
few segments;
a symbol issued once per layer scores lower, since one segment per step also holds the step's head
and tail. The anchor is the best-scoring symbol (within ``TIE`` of the best, the finest: the one
issued most often). When the stream holds optimizer kernels (``multi_tensor_apply``, Adam, SGD ...),
only symbols issued about as often as the optimizer's are candidates: a training step ends with
one optimizer step, whatever else (a validation pass every N steps) runs between them.

**The boundary.** Where in the unit one step ends and the next begins is where the host turns
around: of the offsets inside the typical segment, the one before which the CPU spends longest
between two launches (data loading, a synchronize, the Python around the step), as a median over
the typical segments. Each iteration runs from the launch at that offset to the next one; its CPU
range ends where the next begins (the last one's where its last launch returned), so the host time
between steps belongs to a step, as it does in the wall-clock period.

**Graphs that take turns.** A program that double-buffers captures one CUDA Graph per buffer and
replays them in turn: traced per graph, the two have names of their own, so the symbol sequence
repeats only every two steps. Graphs whose replays take alike GPU time (within ``GRAPH_ALIKE``) are
read as one symbol when that makes the unit a proper divisor of the unit without it (each graph
plays the same role in the step); a forward and a backward graph of alike time do not shorten the
unit, and stay apart.

**Threads that continue a loop.** Execution contexts served by threads that are started anew for
each phase leave a loop spread over several short-lived threads, some with too few steps of their
own. A thread without a loop of its own whose launches cut by a found loop's first symbol give
segments of that loop's composition runs that loop too (``_continued``).

**Declined** when no symbol scores ``MIN_SCORE``, fewer than ``MIN_REPEATS`` iterations are found, or
the iterations launched less than ``MIN_COVERAGE`` of the GPU time: then there is no iteration, as
before, and ``why`` says what was tried.

Anything that marks the loop exactly is better: ``torch.cuda.nvtx.range("step")``, ``nvtx.annotate``
or ``nsysan profile --annotate`` (docs/iterations.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nsysan.analyses.join import launched

INFERRED_NAME = "GPU-inferred step"
INFERRED_HOW = "inferred (from the GPU work: no NVTX range of the program's own repeats)"
MIN_REPEATS = 3
INFERRED_LEAD = 0.25  # the leading share of inferred iterations a slow one extends the warm-up over
MIN_SCORE = 0.5
MIN_COVERAGE = 0.25
COVERAGE_CLOSE = 0.8
TIE = 0.03
LENGTH_SLACK = 0.25
LENGTH_WEIGHT = 0.9
MERGED_SHARE = 0.8  # the merged stream's loop wins when its alike steps hold this share of the per-thread loops'
OPT_SLACK = 0.15
INTERLEAVED = 0.5  # the share of launches that change the launching thread in side-by-side launching
MAX_CONTINUED = 4  # the loops (most GPU time first) tried for a thread with none of its own
GRAPH_ALIKE = 0.25  # graphs whose mean replay times are within this share of each other may alias
GRAPH_NAME = re.compile(r"^(\[CUDA graph launch: )?\[CUDA graph \d+\](, \.\.\.\])?$")  # a whole-graph replay
MAX_PHASE_CELLS = 4_000_000  # offsets x segments read to find the boundary (segments sampled beyond)
OPTIMIZER = re.compile(r"multi_tensor_apply|adam|sgd|lamb_|lion|optimizer|adagrad|rmsprop|fused_adam", re.I)
_MIX = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class Inferred:
    """Iterations found in the GPU work: ``instances`` has one row per iteration in the columns of
    ``nvtx.ranges`` that the iteration model reads (pid, tid, start_ns, end_ns, dur_ns, gpu_ops,
    proj_start_ns, proj_end_ns, proj_ns, gpu_after_end_ns); ``loops`` one summary per loop found."""
    instances: pd.DataFrame
    loops: list[dict[str, Any]] = field(default_factory=list)
    why: str = ""


@dataclass(frozen=True)
class _Stream:
    pid: int
    tid: np.ndarray  # per launch
    sym: np.ndarray  # per launch: symbol code
    api_start: np.ndarray
    api_end: np.ndarray
    gpu_start: np.ndarray  # per launch: its ops' first start, last end, GPU time, op count
    gpu_end: np.ndarray
    gpu_ns: np.ndarray
    device: np.ndarray


def symbol_names(ops: pd.DataFrame) -> list[str]:
    """The name of each symbol code ``launch_streams`` gives: the ops' names, then the same names as
    the first node of a CUDA Graph launch traced per node."""
    names = ([str(x) for x in ops["name"].cat.categories] if isinstance(ops["name"].dtype, pd.CategoricalDtype)
             else [str(x) for x in pd.factorize(ops["name"].astype(str))[1]])
    return names + [f"[CUDA graph launch: {x}, ...]" for x in names] + ["[unnamed]"]


def launch_streams(ops: pd.DataFrame) -> list[_Stream]:
    """One stream of launches per process (ops with their launching call), in issue order."""
    if len(ops) == 0 or "api_start_ns" not in ops.columns:
        return []
    n_names = (len(symbol_names(ops)) - 1) // 2
    ok = launched(ops)
    names = ops["name"]
    codes = (names.cat.codes.to_numpy() if isinstance(names.dtype, pd.CategoricalDtype)
             else pd.factorize(names.astype(str))[0]).astype(np.int64)
    pid = ops["pid"].to_numpy().astype(np.int64)[ok]
    tid = ops["tid"].to_numpy().astype(np.int64)[ok]
    corr = ops["correlation_id"].to_numpy().astype(np.int64)[ok]
    api0 = ops["api_start_ns"].to_numpy().astype(np.int64)[ok]
    api1 = ops["api_end_ns"].to_numpy().astype(np.int64)[ok]
    st, en = ops["start_ns"].to_numpy().astype(np.int64)[ok], ops["end_ns"].to_numpy().astype(np.int64)[ok]
    dev = ops["device_id"].to_numpy().astype(np.int64)[ok]
    codes = codes[ok]
    order = np.lexsort((st, corr, api0, pid))
    cols = (pid, tid, corr, api0, api1, st, en, dev, codes)
    pid, tid, corr, api0, api1, st, en, dev, codes = (x[order] for x in cols)
    first = np.ones(len(pid), dtype=bool)  # one launch = one (pid, correlation id): graph nodes share it
    first[1:] = (pid[1:] != pid[:-1]) | (corr[1:] != corr[:-1])
    cuts = np.flatnonzero(first)
    dur = np.maximum(en - st, 0)
    gstart = np.minimum.reduceat(st, cuts) if len(cuts) else st
    gend = np.maximum.reduceat(en, cuts) if len(cuts) else en
    gns = np.add.reduceat(dur, cuts) if len(cuts) else dur
    pid, tid, api0, api1, dev, codes = (x[cuts] for x in (pid, tid, api0, api1, dev, codes))
    if "api_name" in ops.columns:  # a graph launch traced per node: its own symbol, not its first kernel's
        graph = ops["api_name"].astype(str).str.contains("GraphLaunch", regex=False).to_numpy()
        graph = graph[ok][order][cuts]
        codes = np.where(graph & (codes >= 0), codes + n_names, codes)
    codes = np.where(codes < 0, 2 * n_names, codes)  # an op without a name: one symbol of its own
    if len(pid) == 0:
        return []
    out = []
    bounds = np.flatnonzero(np.concatenate([[True], pid[1:] != pid[:-1], [True]]))
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        out.append(_Stream(int(pid[a]), tid[a:b], codes[a:b], api0[a:b], api1[a:b], gstart[a:b], gend[a:b],
                           gns[a:b], dev[a:b]))
    return out


@dataclass(frozen=True)
class _Unit:
    starts: np.ndarray  # positions of the iterations' first launches in the stream
    stop: int  # position after the last iteration's last launch
    length: int  # launches in the typical iteration
    anchor: int  # symbol code
    score: float
    first_symbol: int
    held: int = 0  # GPU time of the alike iterations


def _hashes(sym: np.ndarray) -> np.ndarray:
    """Prefix sums (uint64, wrapping) of a per-symbol 64-bit weight: a segment's composition hash is a
    difference of two of them, whatever the order of its symbols."""
    w = (sym.astype(np.uint64) + np.uint64(1)) * _MIX
    w ^= w >> np.uint64(29)
    w *= np.uint64(0xBF58476D1CE4E5B9)
    w ^= w >> np.uint64(32)
    c = np.zeros(len(sym) + 1, dtype=np.uint64)
    np.cumsum(w, out=c[1:])
    return c


def _scores(sym: np.ndarray, min_count: int, max_count: int | None, runs: bool = True, cum: np.ndarray | None = None,
            c: np.ndarray | None = None) -> list[tuple[float, int, int, np.ndarray, int, int]]:
    """Per candidate anchor symbol: (score, count, symbol, positions, modal composition hash, GPU time
    of its alike segments). With ``runs``, a symbol issued k times in a row is one occurrence (the
    run's first: an optimizer kernel once per parameter group); without, every launch is (a CUDA Graph
    replayed once a step). ``cum``: the prefix sums of the launches' GPU time; ``c``: ``_hashes(sym)``."""
    at = np.flatnonzero(_run_starts(sym)) if runs else np.arange(len(sym))
    counts = np.bincount(sym[at], minlength=int(sym.max()) + 1 if len(sym) else 0)
    cand = np.flatnonzero((counts >= max(min_count, MIN_REPEATS)) & ((counts <= max_count) if max_count else True))
    if not len(cand):
        return []
    order = at[np.argsort(sym[at], kind="stable")]
    offsets = np.concatenate([[0], np.cumsum(counts)])
    c = _hashes(sym) if c is None else c
    out = []
    with np.errstate(over="ignore"):
        for s in cand.tolist():
            p = _inner(order[offsets[s]:offsets[s + 1]])
            if len(p) < MIN_REPEATS:
                continue
            h = c[p[1:]] - c[p[:-1]]
            vals, inv, k = np.unique(h, return_inverse=True, return_counts=True)
            j = int(np.argmax(k))
            # the share of the span from the first occurrence to the last held by alike segments: a
            # symbol issued in runs (a copy ten times in a row) makes alike one-launch segments that
            # hold little of the stream
            span = int(p[-1] - p[0])
            d = np.diff(p)
            same = inv.reshape(-1) == j
            alike = int(d[same].sum())
            # steps whose shapes vary (another GEMM variant for another sequence length) differ in
            # composition but not in length: segments within LENGTH_SLACK of the median length count,
            # at LENGTH_WEIGHT (an exact match wins a tie)
            med = float(np.median(d))
            close = np.abs(d - med) <= LENGTH_SLACK * med
            near = int(d[close].sum())
            if LENGTH_WEIGHT * near > alike:
                alike, same = int(LENGTH_WEIGHT * near), close
            held = int((cum[p[1:][same]] - cum[p[:-1][same]]).sum()) if cum is not None else 0
            # few segments are weak evidence: 3 alike segments of 3 requests say less than 130 of 135
            # tokens (discounted by 1 / (segments + 1))
            score = (alike / span if span else 0.0) * len(h) / (len(h) + 1)
            out.append((score, int(counts[s]), s, p, int(vals[j]), held))
    return out


def _inner(p: np.ndarray) -> np.ndarray:
    """Occurrences without the leading and trailing ones more than 3x the median segment away from
    the next (the anchor's kernel also ran in the start-up, or after the loop)."""
    if len(p) < MIN_REPEATS + 1:
        return p
    d = np.diff(p)
    far = d > 3 * max(float(np.median(d)), 1.0)
    if not far.any():
        return p
    a, b = 0, len(d)
    while a < b and far[a]:
        a += 1
    while b > a and far[b - 1]:
        b -= 1
    return p[a:b + 1]


def _run_starts(sym: np.ndarray) -> np.ndarray:
    """Which launches start a run of one symbol (the first of k identical launches in a row)."""
    run = np.ones(len(sym), dtype=bool)
    run[1:] = sym[1:] != sym[:-1]
    return run


def _optimizer_count(sym: np.ndarray, names: list[str]) -> int | None:
    """How often the stream's least frequent optimizer kernel runs (one per step at least), if any."""
    counts = np.bincount(sym[_run_starts(sym)])
    seen = np.flatnonzero(counts >= MIN_REPEATS)
    hits = [int(counts[s]) for s in seen.tolist() if s < len(names) and OPTIMIZER.search(names[s] or "")]
    return min(hits) if hits else None


def find_unit(sym: np.ndarray, api_start: np.ndarray, api_end: np.ndarray, names: list[str],
              gpu_ns: np.ndarray | None = None) -> _Unit | None:
    """The repeating unit of one launch stream (module doc), or None. ``gpu_ns``: each launch's GPU
    time; the candidates whose occurrences span (nearly) the most of it are considered (as a range
    must launch nearly the most GPU time to be the iteration)."""
    n = len(sym)
    if n < 2 * MIN_REPEATS:
        return None
    opt = _optimizer_count(sym, names)
    lo, hi = (int(np.floor(opt * (1 - OPT_SLACK))), int(np.ceil(opt * (1 + OPT_SLACK)))) if opt else (MIN_REPEATS, None)
    cum = np.concatenate([[0], np.cumsum(gpu_ns)]) if gpu_ns is not None and len(gpu_ns) == n else None
    c = _hashes(sym)
    sc = _scores(sym, lo, hi, True, cum, c) + _scores(sym, lo, hi, False, cum, c)
    sc = [x for x in sc if x[0] >= MIN_SCORE]
    if not sc:
        return None
    if cum is not None and cum[-1] > 0:  # of the loops, the ones whose alike steps hold nearly the most GPU time
        top = max(x[5] for x in sc)
        sc = [x for x in sc if x[5] >= COVERAGE_CLOSE * top]
    best = max(x[0] for x in sc)
    score, _, anchor, p, mode, held = max((x for x in sc if x[0] >= best - TIE), key=lambda x: (x[1], x[0], -x[2]))
    with np.errstate(over="ignore"):
        h = c[p[1:]] - c[p[:-1]]
    seg_len = np.diff(p)
    modal = np.flatnonzero(h == np.uint64(mode))
    length = int(np.median(seg_len[modal]))
    offset = _boundary_offset(p[modal], length, api_start, api_end)
    starts = p + offset if offset <= length // 2 else p[1:] - (length - offset)
    starts = starts[(starts >= 0) & (starts < n)]
    starts = _trim(np.unique(starts), length)
    if len(starts) < MIN_REPEATS:
        return None
    stop = _last_stop(starts, length, api_start, n)
    first = np.bincount(sym[starts]).argmax()
    return _Unit(starts, stop, length, int(anchor), score, int(first), int(held))


def graph_aliases(sym: np.ndarray, names: list[str], gpu_ns: np.ndarray) -> np.ndarray | None:
    """``sym`` with the symbols of whole-graph replays whose mean GPU times are alike (within
    ``GRAPH_ALIKE``, chained in order of time) read as the first of them; None when no two alias."""
    graphs = np.array([s for s in np.unique(sym).tolist() if s < len(names) and GRAPH_NAME.match(names[s])],
                      dtype=np.int64)
    if len(graphs) < 2:
        return None
    size = int(sym.max()) + 1
    total = np.bincount(sym, weights=gpu_ns.astype(np.float64), minlength=size)
    mean = total[graphs] / np.bincount(sym, minlength=size)[graphs]
    order = np.argsort(mean, kind="stable")
    g, m = graphs[order], mean[order]
    new_group = np.concatenate([[True], m[1:] > (1 + GRAPH_ALIKE) * np.maximum(m[:-1], 1.0)])
    if new_group.all():
        return None
    head = g[np.flatnonzero(new_group)][np.cumsum(new_group) - 1]
    lut = np.arange(int(sym.max()) + 1, dtype=sym.dtype)
    lut[g] = head
    return lut[sym]


def find_loop(sym: np.ndarray, api_start: np.ndarray, api_end: np.ndarray, names: list[str],
              gpu_ns: np.ndarray) -> _Unit | None:
    """``find_unit``, with alike graph replays read as one symbol where that divides the unit
    (module doc: graphs that take turns)."""
    unit = find_unit(sym, api_start, api_end, names, gpu_ns)
    alias = graph_aliases(sym, names, gpu_ns)
    if alias is None:
        return unit
    other = find_unit(alias, api_start, api_end, names, gpu_ns)
    if other is None:
        return unit
    if unit is None:  # too few steps to repeat unaliased: graphs that take turns still repeat
        return other if other.length >= 2 else None
    if unit.length % other.length == 0 and unit.length // other.length >= 2 and other.score >= unit.score - TIE:
        return other
    return unit


def _last_stop(starts: np.ndarray, length: int, api_start: np.ndarray, n: int) -> int:
    """Where the last iteration ends: its typical number of launches, cut where its CPU time passes
    twice the typical iteration's (what follows the loop, a tail of other work or another loop, is
    not its step)."""
    stop = min(n, int(starts[-1]) + length)
    per = np.diff(api_start[starts])
    if len(per):
        limit = int(api_start[starts[-1]]) + 2 * int(np.median(per))
        stop = min(stop, max(int(starts[-1]) + 1, int(np.searchsorted(api_start, limit, side="right"))))
    return stop


def _boundary_offset(seg_starts: np.ndarray, length: int, api_start: np.ndarray, api_end: np.ndarray) -> int:
    """The offset in the typical segment before which the CPU spends longest between two launches
    (median over the typical segments)."""
    if length <= 1 or len(seg_starts) == 0:
        return 0
    take = seg_starts
    if len(take) * length > MAX_PHASE_CELLS:  # evenly spaced segments, enough for a median
        take = take[np.linspace(0, len(take) - 1, max(MAX_PHASE_CELLS // length, 3)).astype(np.int64)]
    idx = take[:, None] + np.arange(length)[None, :]
    prev = np.maximum(idx - 1, 0)
    gap = np.where(idx > 0, api_start[idx] - api_end[prev], 0)
    med = np.median(gap, axis=0)
    return int(np.argmax(med))


def _trim(starts: np.ndarray, length: int) -> np.ndarray:
    """Without leading and trailing iterations far longer than the typical one (the anchor's kernel
    also ran in the start-up, or after the loop): they are not steps of this loop."""
    if len(starts) < 2:
        return starts
    seg = np.diff(starts)
    long = seg > 3 * max(length, 1)
    a = 0
    while a < len(seg) and long[a]:
        a += 1
    return starts[a:] if a < len(starts) - 1 else starts


def _loops(s: _Stream, names: list[str], read: np.ndarray) -> list[tuple[np.ndarray, _Unit]]:
    """The loops of one process, each as (its launches' positions, its unit): one over all of its
    launches (threads taking turns: the autograd thread launches the backward pass while the main
    thread waits), or one per launching thread (threads launching side by side, each its own loop:
    worker threads, several execution contexts), whichever holds more GPU time in alike iterations
    (the merged one at ``MERGED_SHARE`` of the other's or more). ``read``: the stream's symbols with
    alike graph replays read as one, for the threads that continue a loop."""
    every = np.arange(len(s.tid))
    merged = find_loop(s.sym, s.api_start, s.api_end, names, s.gpu_ns)
    tids = np.unique(s.tid)
    if len(tids) == 1:
        return [(every, merged)] if merged is not None else []
    per: list[tuple[np.ndarray, _Unit]] = []
    rest: list[np.ndarray] = []
    for t in tids.tolist():
        rows = np.flatnonzero(s.tid == t)
        u = find_loop(s.sym[rows], s.api_start[rows], s.api_end[rows], names, s.gpu_ns[rows]) \
            if len(rows) >= 2 * MIN_REPEATS else None
        if u is not None:
            per.append((rows, u))
        else:
            rest.append(rows)
    ranked = sorted(per, key=lambda x: -x[1].held)[:MAX_CONTINUED]  # the loops a short-lived thread may continue
    per += [x for rows in rest if (x := _continued(rows, ranked, read, s.gpu_ns)) is not None]
    if merged is not None and merged.held >= MERGED_SHARE * sum(u.held for _, u in per) \
            and not _side_by_side(s.tid[int(merged.starts[0]):merged.stop]):
        return [(every, merged)]
    return per


def _side_by_side(tid: np.ndarray) -> bool:
    """Whether the threads of a merged loop launch side by side, not in turns: threads that take
    turns hand over a few times a step; threads launching at once interleave, the launching thread
    changing more often than every ``1 / INTERLEAVED`` launches."""
    return len(tid) > 1 and float((tid[1:] != tid[:-1]).mean()) > INTERLEAVED


def _modal(sym: np.ndarray, unit: _Unit) -> int:
    """The composition hash (``_hashes``) most of ``unit``'s iterations have in the launches ``sym``."""
    c = _hashes(sym)
    with np.errstate(over="ignore"):
        vals, k = np.unique(c[np.append(unit.starts[1:], unit.stop)] - c[unit.starts], return_counts=True)
    return int(vals[int(np.argmax(k))])


def _continued(rows: np.ndarray, per: list[tuple[np.ndarray, _Unit]], read: np.ndarray,
               gpu_ns: np.ndarray) -> tuple[np.ndarray, _Unit] | None:
    """The loop a thread without one of its own continues (module doc), as (its launches, the unit
    cut from them), or None: the first found loop whose first symbol cuts the thread's launches into
    at least one segment of the loop's typical composition. ``read``: the process's symbols with
    alike graph replays read as one (one context's graph and another's: ``graph_aliases``)."""
    theirs = read[rows]
    c = _hashes(theirs)
    for own, unit in per:
        mode = _modal(read[own], unit)
        first = int(read[own][int(unit.starts[0])])
        starts = np.flatnonzero(theirs == first)
        if len(starts) == 0:
            continue
        stops = np.append(starts[1:], min(len(theirs), int(starts[-1]) + unit.length))
        with np.errstate(over="ignore"):
            alike = (c[stops] - c[starts]) == np.uint64(mode)
        if not alike.any():
            continue
        inside = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(gpu_ns[rows], out=inside[1:])
        held = int((inside[stops[alike]] - inside[starts[alike]]).sum())
        return rows, _Unit(starts, int(stops[-1]), unit.length, unit.anchor, unit.score, first, held)
    return None


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
        found, apart = _beside(s, _loops(s, names, read), read)
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


def _beside(s: _Stream, loops: list[tuple[np.ndarray, _Unit]],
            read: np.ndarray) -> tuple[list[tuple[np.ndarray, _Unit]], list[tuple[np.ndarray, _Unit]]]:
    """The loops of one process that are its loop (those of the unit holding the most GPU time, on
    whichever threads, with alike graph replays read as one: ``read``) and the loops that run beside
    it, apart from those that run wholly before or after it (an engine's warm-up runs in the set-up,
    a phase of other work): (kept, set apart)."""
    if len(loops) < 2:
        return loops, []
    keys = [(unit.length, _modal(read[rows], unit)) for rows, unit in loops]
    spans = [(int(s.api_start[rows][int(unit.starts[0])]), int(s.api_end[rows][:unit.stop].max()))
             for rows, unit in loops]
    held: dict[tuple[int, int], int] = {}
    for key, (_, unit) in zip(keys, loops):
        held[key] = held.get(key, 0) + unit.held
    main = max(held, key=lambda x: held[x])
    lo = min(a for key, (a, _) in zip(keys, spans) if key == main)
    hi = max(b for key, (_, b) in zip(keys, spans) if key == main)
    keep = [key == main or (a < hi and b > lo) for key, (a, b) in zip(keys, spans)]
    return [x for x, k in zip(loops, keep) if k], [x for x, k in zip(loops, keep) if not k]


def _describe(s: _Stream, rows: np.ndarray, unit: _Unit, names: list[str]) -> str:
    tid = int(np.bincount(np.unique(s.tid[rows], return_inverse=True)[1][unit.starts]).argmax())
    first = names[unit.first_symbol] if unit.first_symbol < len(names) else ""
    return (f"a {unit.length}-launch sequence starting with '{_short(first)}' repeats {len(unit.starts)} times "
            f"on thread {int(np.unique(s.tid[rows])[tid])} of process {s.pid}")


def _instances(s: _Stream, rows_of: np.ndarray, unit: _Unit,
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
