"""The repeating unit of one launch stream: the anchor symbol that cuts it into alike steps, and the
boundary where one step ends and the next begins (``inferred`` says how the units become iterations).

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
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

MIN_REPEATS = 3
MIN_SCORE = 0.5
COVERAGE_CLOSE = 0.8
TIE = 0.03
LENGTH_SLACK = 0.25
LENGTH_WEIGHT = 0.9
OPT_SLACK = 0.15
GRAPH_ALIKE = 0.25  # graphs whose mean replay times are within this share of each other may alias
GRAPH_NAME = re.compile(r"^(\[CUDA graph launch: )?\[CUDA graph \d+\](, \.\.\.\])?$")  # a whole-graph replay
MAX_PHASE_CELLS = 4_000_000  # offsets x segments read to find the boundary (segments sampled beyond)
OPTIMIZER = re.compile(r"multi_tensor_apply|adam|sgd|lamb_|lion|optimizer|adagrad|rmsprop|fused_adam", re.I)
_MIX = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class RepeatingUnit:
    starts: np.ndarray  # positions of the iterations' first launches in the stream
    stop: int  # position after the last iteration's last launch
    length: int  # launches in the typical iteration
    anchor: int  # symbol code
    score: float
    first_symbol: int
    held: int = 0  # GPU time of the alike iterations


def composition_hashes(sym: np.ndarray) -> np.ndarray:
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
    replayed once a step). ``cum``: the prefix sums of the launches' GPU time; ``c``: ``composition_hashes(sym)``."""
    at = np.flatnonzero(_run_starts(sym)) if runs else np.arange(len(sym))
    counts = np.bincount(sym[at], minlength=int(sym.max()) + 1 if len(sym) else 0)
    cand = np.flatnonzero((counts >= max(min_count, MIN_REPEATS)) & ((counts <= max_count) if max_count else True))
    if not len(cand):
        return []
    order = at[np.argsort(sym[at], kind="stable")]
    offsets = np.concatenate([[0], np.cumsum(counts)])
    c = composition_hashes(sym) if c is None else c
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
              gpu_ns: np.ndarray | None = None) -> RepeatingUnit | None:
    """The repeating unit of one launch stream (module doc), or None. ``gpu_ns``: each launch's GPU
    time; the candidates whose occurrences span (nearly) the most of it are considered (as a range
    must launch nearly the most GPU time to be the iteration)."""
    n = len(sym)
    if n < 2 * MIN_REPEATS:
        return None
    opt = _optimizer_count(sym, names)
    lo, hi = (int(np.floor(opt * (1 - OPT_SLACK))), int(np.ceil(opt * (1 + OPT_SLACK)))) if opt else (MIN_REPEATS, None)
    cum = np.concatenate([[0], np.cumsum(gpu_ns)]) if gpu_ns is not None and len(gpu_ns) == n else None
    c = composition_hashes(sym)
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
    return RepeatingUnit(starts, stop, length, int(anchor), score, int(first), int(held))


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
              gpu_ns: np.ndarray) -> RepeatingUnit | None:
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
