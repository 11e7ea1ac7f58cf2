"""What the submitting threads did in the host and sync gaps, summed over any set of gaps.

``GapActivity`` holds, per explained gap, the time of each traced activity (CUDA API calls, OS
runtime calls, NVTX ranges: each nanosecond of the gap given to one, ``thread_activity``), the
untraced rest and the launching call's tail. ``activity_time`` sums it over any set of gaps, each
nanosecond of a thread once: where one thread feeds several devices that idle at once, its time in
their gaps is credited once, not once per device (``Overlaps``, made by ``with_overlaps``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from nsysan._native.windows import spans
from nsysan.analyses.frames import group_rows, name_in, one_key
from nsysan.analyses.thread_activity import SOURCES, ThreadActivity
from nsysan.trace.model import Trace

UNTRACED_TIME = "untraced CPU work"  # in attributions: the part of the gaps no traced activity covers
LAUNCH_TIME = "the launching call until the GPU starts"  # in attributions: the gaps' time after the call starts

@dataclass(frozen=True)
class GapActivity:
    """What the submitting threads did in the host and sync gaps of one ``idle_gaps`` frame (the
    analysis' ``gap_activity``, beside its ``gaps``), as a sparse table of exclusive time: one entry
    per (gap, activity) with time. ``rows``: the gap's position in that frame; ``label``: ids into
    ``labels`` ("source:name"); ``ns``: the time of that activity in the gap up to the launching
    call's start, each nanosecond counted once (see ``explain_gaps``); ``n``: the rows of the frame
    it was made for (``activity_time`` takes it for that frame only)."""

    rows: np.ndarray
    label: np.ndarray
    ns: np.ndarray
    labels: list[str]
    n: int
    overlaps: Overlaps | None = None  # where one thread's gaps overlap (several devices idle at once)

    def reordered(self, order: np.ndarray) -> GapActivity:
        """The same table for the frame taken in ``order`` (``frame.take(order)``)."""
        inv = np.empty(len(order), dtype=np.int64)
        inv[order] = np.arange(len(order), dtype=np.int64)
        ov = self.overlaps
        if ov is not None:
            ov = replace(ov, cover_row=inv[ov.cover_row])
        return GapActivity(inv[self.rows].astype(self.rows.dtype), self.label, self.ns, self.labels, self.n, ov)


@dataclass(frozen=True)
class Overlaps:
    """The time one submitting thread spent in several host or sync gaps at once (gaps of several
    devices that idle together, fed by one thread: a one-process model-parallel loop), so that
    ``activity_time`` credits each of the thread's nanoseconds once. The thread's gaps are cut at
    every gap's start, end and launching call's start into pieces; a piece that two or more gaps
    cover is kept: its length (``piece_ns``), each gap covering it (``cover_piece``, ``cover_row``:
    the gap's position in the frame; ``cover_explained``: the piece lies before that gap's launching
    call, where the gap is explained, else in its tail; ``cover_version``: 1 where the gap's entries
    left out the NVTX ranges swept for detail windows only, see ``ThreadActivity.exclusive_sums``,
    else 0), and what the thread did in it (``entry_*``: exclusive time per label id and version, as
    in the gaps' own entries)."""

    piece_ns: np.ndarray
    cover_piece: np.ndarray
    cover_row: np.ndarray
    cover_explained: np.ndarray
    cover_version: np.ndarray
    entry_piece: np.ndarray
    entry_version: np.ndarray
    entry_label: np.ndarray
    entry_ns: np.ndarray


def _thread_pieces(s: np.ndarray, c: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """One thread's gaps [s, e) (explained up to ``c``) cut at every bound: the pieces two or more
    cover, as (piece starts, piece ends, and per (piece, gap) pair: piece, gap position, explained);
    None when no two gaps overlap."""
    order = np.argsort(s, kind="stable")
    if len(s) < 2 or bool((s[order][1:] >= np.maximum.accumulate(e[order])[:-1]).all()):
        return None
    b = np.unique(np.concatenate([s, c, e]))
    g, seg = spans(np.searchsorted(b, s), np.searchsorted(b, e))  # gap g covers [b[seg], b[seg + 1])
    multi = np.bincount(seg, minlength=len(b))[seg] >= 2
    g, seg = g[multi], seg[multi]
    useg, piece = np.unique(seg, return_inverse=True)
    return b[useg], b[useg + 1], piece.astype(np.int64), g.astype(np.int64), b[seg + 1] <= c[g]


def with_overlaps(trace: Trace, table: GapActivity, rows: np.ndarray, lo: np.ndarray, cut: np.ndarray,
                  hi: np.ndarray, pid: np.ndarray, tid: np.ndarray, detail: np.ndarray) -> GapActivity:
    """``table`` with its ``Overlaps``: for each thread whose host and sync gaps ``rows`` (spans
    [lo, hi), explained up to ``cut``) overlap, the pieces they share and what the thread did in
    them (the same exclusive sums as the gaps' own entries); ``table`` itself when none overlap."""
    parts: list[tuple[Any, ...]] = []  # ("e", entries...) and ("c", pieces...)
    labels = {t: i for i, t in enumerate(table.labels)}
    index: ThreadActivity | None = None
    is_detail = np.isin(rows, detail)
    n_pieces = 0
    only = one_key(pid, tid)
    for (p, t), sel in ([(only, slice(None))] if only is not None else group_rows(pid, tid)):
        at = np.arange(len(rows))[sel]
        cut_up = _thread_pieces(lo[at], cut[at], hi[at])
        if cut_up is None:
            continue
        ps, pe, piece, g, expl = cut_up
        index = index or ThreadActivity(trace)
        sweep = index.nvtx_swept(p, t, lo[at], cut[at])
        version = (sweep & ~is_detail[at][g]).astype(np.int8)
        for v in ((0, 1) if sweep else (0,)):
            names, win, src, code, ns = index.exclusive_sums(p, t, ps, pe, None if v == 0 else np.empty(0, np.int64),
                                                             sweep)
            ids = label_ids(labels, names, src, code) if len(win) else np.empty(0, np.int32)
            parts.append(("e", win + n_pieces, np.full(len(win), v, np.int8), ids, ns))
        parts.append(("c", pe - ps, piece + n_pieces, rows[at][g], expl, version))
        n_pieces += len(ps)
        index.forget(p, t)
    if not parts:
        return table
    def cat(kind: str, k: int, dt: type) -> np.ndarray:
        return joined([x[k] for x in parts if x[0] == kind], dt)

    ov = Overlaps(cat("c", 1, np.int64), cat("c", 2, np.int64), cat("c", 3, np.int64), cat("c", 4, np.bool_),
                  cat("c", 5, np.int8), cat("e", 1, np.int64), cat("e", 2, np.int8), cat("e", 3, np.int32),
                  cat("e", 4, np.int64))
    return GapActivity(table.rows, table.label, table.ns, sorted(labels, key=labels.__getitem__), table.n, ov)


def _once(ov: Overlaps, keep: np.ndarray, n_labels: int) -> tuple[np.ndarray, int, int]:
    """What crediting each of a thread's nanoseconds once takes off the sums over the gaps ``keep``
    (a mask over the frame): per label id, off the untraced time, off the launching calls' tails.
    In a piece several kept gaps cover: when it lies before one's launching call (explained), it
    is credited once to what the thread did then (a version-0 gap's entries first) and to no
    gap's tail; else once to the tails."""
    sel = keep[ov.cover_row]
    piece, expl, ver = ov.cover_piece[sel], ov.cover_explained[sel], ov.cover_version[sel]
    n_p = len(ov.piece_ns)
    n_sel = np.bincount(piece, minlength=n_p)
    cnt = np.stack([np.bincount(piece[expl & (ver == v)], minlength=n_p) for v in (0, 1)])  # explained, per version
    n_exp = cnt.sum(axis=0)
    multi = n_sel >= 2
    tails = np.where(n_exp > 0, n_sel - n_exp, n_sel - 1)
    off_tail = int((ov.piece_ns * tails)[multi].sum())
    extra = cnt.copy()  # explained credits beyond the one kept
    extra[0] -= (cnt[0] > 0)
    extra[1] -= (cnt[0] == 0) & (cnt[1] > 0)
    extra *= multi
    off = np.zeros(n_labels, np.int64)
    off_untraced = 0
    for v in (0, 1):
        m = ov.entry_version == v
        k = extra[v][ov.entry_piece[m]]
        off += np.bincount(ov.entry_label[m], weights=ov.entry_ns[m] * k, minlength=n_labels).astype(np.int64)
        traced = np.bincount(ov.entry_piece[m], weights=ov.entry_ns[m], minlength=n_p).astype(np.int64)
        off_untraced += int(((ov.piece_ns - traced) * extra[v]).sum())
    return off, off_untraced, off_tail


def activity_time(gaps: pd.DataFrame, table: GapActivity, rows: np.ndarray | None = None) -> pd.DataFrame:
    """Where the idle time of host and sync gaps went, by overlap: per activity ("source:name"), the
    time it ran in those gaps (exclusive: each nanosecond counted once, see ``explain_gaps``) and the
    gaps it ran in; then ``UNTRACED_TIME`` (the rest of the gaps up to the launching calls' starts) and
    ``LAUNCH_TIME`` (from the launching calls' starts to the gaps' ends). The times add up to the
    gaps' total per thread, each of its nanoseconds once: where a thread's gaps overlap (several
    devices idle at once), the shared time is credited to what the thread did then (or to the
    launching calls' tails when it lies in tails only) once (``Overlaps``). ``gaps`` and ``table``:
    the frame and the ``GapActivity`` ``idle_gaps_with_activity`` returned (an analysis' ``gaps`` and
    ``gap_activity``); ``rows``: positions in the frame (all its host and sync gaps when None).
    Columns: activity, gaps, ns, sorted by ns (descending), then activity."""
    cols = ["activity", "gaps", "ns"]
    if not isinstance(table, GapActivity) or table.n != len(gaps):
        raise ValueError("activity_time: not the GapActivity of this frame (a selection: pass rows instead)")
    if not len(gaps):
        return pd.DataFrame({"activity": pd.Series([], dtype=object), "gaps": np.zeros(0, np.int64),
                             "ns": np.zeros(0, np.int64)})
    explained = name_in(gaps["cause"], ("host", "sync"))
    if rows is None:
        rows = np.flatnonzero(explained)
    else:
        rows = np.asarray(rows, dtype=np.int64)
        if not (rows.size < 2 or bool((rows[1:] > rows[:-1]).all())):  # (positions in order as a rule)
            rows = np.unique(rows)
        rows = rows[explained[rows]]  # only host and sync gaps are explained
    keep = np.zeros(len(gaps), dtype=bool)
    keep[rows] = True
    hit = keep[table.rows]
    if bool(hit.all()):  # every gap's entries (all host and sync gaps): no copies
        at, lab, ns = table.rows, table.label, table.ns
    else:
        at, lab, ns = table.rows[hit], table.label[hit], table.ns[hit]
    del hit
    per_ns = np.bincount(lab, weights=ns, minlength=len(table.labels)).astype(np.int64)
    # one thread in several gaps at once (devices idle together): each of its nanoseconds credited once
    off, off_untraced, off_tail = (_once(table.overlaps, keep, len(table.labels)) if table.overlaps is not None
                                   else (0, 0, 0))
    per_ns -= off
    del keep
    per_n = np.bincount(lab, minlength=len(table.labels))
    # per gap: the explained window [start, min(call start, end)), its traced and untraced time, the tail
    start, end = gaps["start_ns"].to_numpy()[rows], gaps["end_ns"].to_numpy()[rows]
    span = np.maximum(np.minimum(gaps["api_start_ns"].to_numpy()[rows], end) - start, 0).astype(np.int64)
    traced = np.bincount(at, weights=ns, minlength=len(gaps))[rows].astype(np.int64)
    untraced = span - traced
    tail = gaps["gap_ns"].to_numpy()[rows].astype(np.int64) - span
    ids = np.flatnonzero(per_ns > 0)
    out = pd.DataFrame({
        "activity": pd.Series([table.labels[i] for i in ids.tolist()] + [UNTRACED_TIME, LAUNCH_TIME], dtype=object),
        "gaps": np.concatenate([per_n[ids], [int((untraced > 0).sum()), int((tail > 0).sum())]]).astype(np.int64),
        "ns": np.concatenate([per_ns[ids], [int(untraced.sum()) - off_untraced,
                                            int(tail.sum()) - off_tail]]).astype(np.int64)})
    out = out.loc[out["ns"].to_numpy() > 0]
    return out.sort_values(["ns", "activity"], ascending=[False, True], kind="stable").reset_index(drop=True)[cols]


def joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    """The arrays ``parts`` end to end, as ``dtype`` (empty when there are none)."""
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype)


def label_ids(labels: dict[str, int], names: dict[str, np.ndarray], src: np.ndarray,
               code: np.ndarray) -> np.ndarray:
    """The label id ("source:name", numbered in ``labels`` as first met: by source, then name code)
    of each entry (source index ``src``, name ``code``): one table of every (source, code) met, looked
    up once per entry."""
    off = np.zeros(len(SOURCES) + 1, dtype=np.int64)  # code -1 (no name) is each source's first slot
    for si, source in enumerate(SOURCES):
        off[si + 1] = off[si] + (len(names[source]) + 1 if source in names else 0)
    comb = off[src]
    comb += code
    comb += 1
    lut = np.zeros(int(off[-1]), dtype=np.int32)
    for u in np.flatnonzero(np.bincount(comb, minlength=int(off[-1]))).tolist():
        si = int(np.searchsorted(off, u, side="right")) - 1
        source, k = SOURCES[si], u - int(off[si]) - 1
        lut[u] = labels.setdefault(f"{source}:{names[source][k] if k >= 0 else ''}", len(labels))
    return lut[comb]
