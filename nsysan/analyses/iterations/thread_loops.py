"""The loops of one process's launch stream: one over all its threads or one per launching thread,
the threads that continue a loop found on another, and which loops are the process's loop.

Threads of one process that take turns (PyTorch's autograd thread launches the backward pass while
the main thread waits) are one stream; threads that launch side by side, each its own loop (worker
threads, several execution contexts), are inferred one by one: whichever reading holds more GPU time
in alike iterations wins (``process_loops``).

**Threads that continue a loop.** Execution contexts served by threads that are started anew for
each phase leave a loop spread over several short-lived threads, some with too few steps of their
own. A thread without a loop of its own whose launches cut by a found loop's first symbol give
segments of that loop's composition runs that loop too (``_continued``).
"""

from __future__ import annotations

import numpy as np

from nsysan.analyses.iterations.launch_stream import LaunchStream
from nsysan.analyses.iterations.repeating_unit import MIN_REPEATS, RepeatingUnit, composition_hashes, find_loop

MERGED_SHARE = 0.8  # the merged stream's loop wins when its alike steps hold this share of the per-thread loops'
INTERLEAVED = 0.5  # the share of launches that change the launching thread in side-by-side launching
MAX_CONTINUED = 4  # the loops (most GPU time first) tried for a thread with none of its own


def process_loops(s: LaunchStream, names: list[str], read: np.ndarray) -> list[tuple[np.ndarray, RepeatingUnit]]:
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
    per: list[tuple[np.ndarray, RepeatingUnit]] = []
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


def modal_hash(sym: np.ndarray, unit: RepeatingUnit) -> int:
    """The composition hash (``composition_hashes``) most of ``unit``'s iterations have in the launches ``sym``."""
    c = composition_hashes(sym)
    with np.errstate(over="ignore"):
        vals, k = np.unique(c[np.append(unit.starts[1:], unit.stop)] - c[unit.starts], return_counts=True)
    return int(vals[int(np.argmax(k))])


def _continued(rows: np.ndarray, per: list[tuple[np.ndarray, RepeatingUnit]], read: np.ndarray,
               gpu_ns: np.ndarray) -> tuple[np.ndarray, RepeatingUnit] | None:
    """The loop a thread without one of its own continues (module doc), as (its launches, the unit
    cut from them), or None: the first found loop whose first symbol cuts the thread's launches into
    at least one segment of the loop's typical composition. ``read``: the process's symbols with
    alike graph replays read as one (one context's graph and another's: ``graph_aliases``)."""
    theirs = read[rows]
    c = composition_hashes(theirs)
    for own, unit in per:
        mode = modal_hash(read[own], unit)
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
        return rows, RepeatingUnit(starts, int(stops[-1]), unit.length, unit.anchor, unit.score, first, held)
    return None


def main_loops(s: LaunchStream, loops: list[tuple[np.ndarray, RepeatingUnit]],
            read: np.ndarray) -> tuple[list[tuple[np.ndarray, RepeatingUnit]], list[tuple[np.ndarray, RepeatingUnit]]]:
    """The loops of one process that are its loop (those of the unit holding the most GPU time, on
    whichever threads, with alike graph replays read as one: ``read``) and the loops that run beside
    it, apart from those that run wholly before or after it (an engine's warm-up runs in the set-up,
    a phase of other work): (kept, set apart)."""
    if len(loops) < 2:
        return loops, []
    keys = [(unit.length, modal_hash(read[rows], unit)) for rows, unit in loops]
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
