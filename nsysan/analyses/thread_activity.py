"""What one thread was doing, window by window: its CUDA API calls, OS runtime calls and NVTX ranges,
each nanosecond of a window given to one activity only, the most specific traced one (a CUDA API
call, else an OS runtime call, else the innermost NVTX range), so a window's entries add up to at
most its span and the rest is untraced.

``ThreadActivity`` finds a thread's rows lazily (only the threads asked for), keeps them
start-sorted with the running maximum of their ends (``Reach``), and cuts them down to the calls
that touch the windows looked at (``_touching``) before it flattens them into one disjoint layer
(``_flatten``) and sums it per window. The gap attribution (``gaps.explain_gaps``) is its user.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from nsysan._native import c_pass, int_buffer
from nsysan._native.windows import range_sums, spans
from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import one_key
from nsysan.trace.columns import str_objects, unique_strings
from nsysan.trace.model import Trace

SOURCES = ("cuda_api", "osrt", "nvtx")  # what a thread was doing: CUDA API, OS runtime, NVTX (innermost)
INNERMOST_MAX = 200_000  # NVTX ranges of one thread turned into innermost segments (a Python sweep)
REACH_MAX_SHARE = 0.25  # above this share of a thread's calls as candidates, every call is tested instead
FEW_THREADS = 8  # threads found by a comparison each before a source's rows are sorted by thread


class ThreadActivity:
    """Per-thread CUDA API, OS runtime and NVTX intervals, found lazily (only threads that submitted
    the work ending an explained gap) and cut down to the calls that touch the gaps looked at."""

    def __init__(self, trace: Trace) -> None:
        nv = trace.nvtx.loc[(trace.nvtx["style"] != "Mark") & trace.nvtx["end_ns"].notna()]
        nv = nv.assign(end_ns=nv["end_ns"].astype("int64"))
        # per source: its frame; once asked, its one thread's packed key (None: several threads) and,
        # past ``FEW_THREADS`` threads asked for, its rows grouped by thread (``_thread_rows``)
        self._sources: list[tuple[str, pd.DataFrame]] = [
            (source, df) for source, df in (("cuda_api", trace.cuda_api), ("osrt", trace.osrt), ("nvtx", nv))
            if len(df)]
        self._single: dict[str, int | None] = {}
        self._grouped: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._asked: dict[str, int] = {}
        self._rows: dict[tuple[int, int], list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray, Reach]]] = {}

    def _thread_rows(self, source: str, df: pd.DataFrame, pid: int, tid: int) -> np.ndarray | slice:
        """The rows (ascending) of thread (pid, tid) in one source's frame; ``slice(None)`` when the
        thread made every row (the usual single submitting thread: its columns are used as they
        are). The first ``FEW_THREADS`` threads asked for are found by a comparison each (no sort,
        no int64 arrays of every row); past that, the rows are grouped by thread once (a stable sort
        of packed pid/tid keys) and each thread is one binary search away, however many threads
        the explained gaps touch."""
        p, t = df["pid"].to_numpy(), df["tid"].to_numpy()
        packed = (pid << 24) | tid
        if source not in self._single:
            only = one_key(p, t)
            self._single[source] = None if only is None else (only[0] << 24) | only[1]
        single = self._single[source]
        if single is not None:
            return slice(None) if single == packed else np.zeros(0, np.int64)
        if source not in self._grouped:
            asked = self._asked[source] = self._asked.get(source, 0) + 1
            if asked <= FEW_THREADS:
                hit = p == pid
                hit &= t == tid
                rows = np.flatnonzero(hit)
                return slice(None) if len(rows) == len(df) else rows
            key = (p.astype(np.int64) << 24) | t.astype(np.int64)
            order = np.argsort(key, kind="stable")
            self._grouped[source] = (key[order], order)
            del key
        sorted_keys, order = self._grouped[source]
        a, b = np.searchsorted(sorted_keys, [packed, packed + 1])
        return slice(None) if b - a == len(df) else np.sort(order[a:b])

    def _thread(self, pid: int, tid: int) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray, Reach]]:
        """Per source: start-sorted starts, ends, name codes, the code -> name table and the running
        maximum of ends (``Reach``), for one thread."""
        key = (pid, tid)
        if key not in self._rows:
            parts = []
            for source, df in self._sources:
                idx = self._thread_rows(source, df, pid, tid)
                if not isinstance(idx, slice) and len(idx) == 0:
                    continue
                # a single submitting thread owns the whole table: use its (start-sorted) columns as
                # they are instead of copying millions of rows
                st, en = df["start_ns"].to_numpy()[idx], df["end_ns"].to_numpy()[idx]
                col = df["name"].array
                if isinstance(col, pd.Categorical):  # codes per row; strings only for the categories
                    codes, cats = np.asarray(col.codes)[idx], np.asarray(col.categories, dtype=object)
                else:
                    # the thread's rows first, then as objects (not every row's, once per thread)
                    cats, codes = unique_strings(np.asarray(col[idx], dtype=object))
                if st.size > 1 and not bool((st[1:] >= st[:-1]).all()):
                    order_st = np.argsort(st, kind="stable")
                    st, en, codes = st[order_st], en[order_st], codes[order_st]
                parts.append((source, st, en, np.asarray(codes), str_objects(cats), Reach(en)))
            self._rows[key] = parts
        return self._rows[key]

    def forget(self, pid: int, tid: int) -> None:
        """Drop the rows kept for thread (pid, tid) (a caller done with that thread)."""
        self._rows.pop((pid, tid), None)

    def nvtx_swept(self, pid: int, tid: int, lo: np.ndarray, hi: np.ndarray) -> bool:
        """Whether ``exclusive_sums`` over all the windows [lo, hi) of thread (pid, tid) sweeps its
        NVTX layer window by window (more than ``INNERMOST_MAX`` nested ranges touch them): the same
        decision must then hold for every part of those windows summed on its own."""
        for source, st, en, _codes, _cats, reach in self._thread(pid, tid):
            if source != "nvtx" or st.size <= INNERMOST_MAX:
                continue
            rows = _touching(st, en, reach, *iv.merge(lo, hi))
            if rows is None or rows.size <= INNERMOST_MAX:
                return False
            s, e = st[rows], en[rows]
            return bool(s.size > 1 and not bool((s[1:] >= e[:-1]).all()))
        return False

    def exclusive_sums(self, pid: int, tid: int, lo: np.ndarray, hi: np.ndarray, detail: np.ndarray | None = None,
                       nvtx_sweep: bool = False) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray,
                                                          np.ndarray]:
        """What thread (pid, tid) did in each window [lo[w], hi[w]), every nanosecond of a window given
        to exactly one activity, the most specific traced thing running then: a CUDA API call (the
        latest-starting one where calls overlap), else an OS runtime call (the same), else the
        innermost NVTX range. An OS runtime call inside a CUDA API call, or a call inside an NVTX
        range, is counted once. The entries of a window add up to at most its span; what is left is
        untraced. Returns (names: source -> code -> name table, win, source index into ``SOURCES``,
        name code, ns), one entry per (window, source, name) with ns > 0, ordered by window.

        The thread's calls that touch a window are flattened into one disjoint, start-sorted layer
        (CUDA API; OS runtime minus CUDA API; innermost NVTX minus both), labelled by (source, name),
        and summed per window by the batched clipped-sum path. NVTX ranges that the batched path does
        not take (``nvtx_swept``: more than ``INNERMOST_MAX`` nested ranges) are swept window by
        window, for the windows in ``detail`` only (row numbers; all when None)."""
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        empty = np.empty(0, np.int64)
        names: dict[str, np.ndarray] = {}
        if len(lo) == 0:
            return names, empty, empty, empty, empty
        layers = self._thread(pid, tid)
        # one layer: a combined code per (source, name): base[source] + code + 1 (code -1: no name)
        base = np.zeros(len(SOURCES) + 1, dtype=np.int64)
        for si, source in enumerate(SOURCES):
            base[si + 1] = base[si] + sum(len(cats) + 1 for src, _s, _e, _c, cats, _r in layers if src == source)
        fast = c_pass("flatten")
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        if fast is not None and not nvtx_sweep and bool((lo[1:] >= hi[:-1]).all()):
            # sorted, disjoint windows (one device's gaps): the C sweep sums them as it goes, no pieces
            given = _c_layers(layers, int(lo[0]), int(hi[-1]), base, names, False, (lo, hi))
            if given is not None:
                w, c, v = (np.frombuffer(b, dtype=t) for b, t in zip(fast(given[0], lo, hi, True),
                                                                    (np.int32, np.int64, np.int64)))
                parts.append(_by_source(w, c, v, base))
                return (names, *_entries_by_window(parts, len(lo)))
        got = _flatten_c(fast, layers, lo, hi, base, names, nvtx_sweep) if fast is not None else None
        flat, swept = got if got is not None else _flatten(layers, lo, hi, base, names, nvtx_sweep)
        del layers, got
        if flat[0].size:
            parts.append(_flat_sums(flat, lo, hi, base))
        if swept is not None:
            part = _swept_sums(swept, flat, lo, hi, detail)
            if part is not None:
                parts.append(part)
        if not parts:
            return names, empty, empty, empty, empty
        return (names, *_entries_by_window(parts, len(lo)))


def _flatten(layers: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray, Reach]], lo: np.ndarray,
             hi: np.ndarray, base: np.ndarray, names: dict[str, np.ndarray], nvtx_sweep: bool,
             ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
    """``exclusive_sums``' one layer: the thread's calls that touch a window [lo, hi), each source
    minus the sources before it, as start-sorted disjoint pieces (starts, ends, combined codes); and
    the NVTX ranges left to the per-window sweep (starts, ends, codes), or None. Fills ``names``."""
    empty = np.empty(0, np.int64)
    wl, wh = iv.merge(lo, hi)
    # the layers taken so far as one: start-sorted disjoint pieces (starts, ends, combined codes)
    flat = (empty, empty, empty)
    swept: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    for source, st, en, codes, cats, reach in layers:
        cut = _touching_rows(st, en, codes, reach, wl, wh)
        if cut is None:
            continue
        st, en, codes = cut
        names[source] = cats
        overlapping = st.size > 1 and not bool((st[1:] >= en[:-1]).all())
        if source == "nvtx" and (nvtx_sweep or (overlapping and st.size > INNERMOST_MAX)):
            swept = (st, en, np.asarray(codes))
            continue
        if overlapping:  # nested or overlapping calls/ranges: the latest-starting one owns each moment
            st, en, owner = iv.innermost(st, en)
            codes = np.asarray(codes)[owner]
        # what the layers before leave of it (their pieces: disjoint, so as good as merged here)
        st, en, codes = _minus(st, en, np.asarray(codes), flat[0], flat[1])
        if st.size == 0:
            continue
        flat = iv.interleave(flat, (st, en, codes.astype(np.int64) + (base[SOURCES.index(source)] + 1)))
        del st, en, codes
    return flat, swept


Pieces = tuple[np.ndarray, np.ndarray, np.ndarray]  # start-sorted (starts, ends, codes)


def _flatten_c(fast: Callable[..., Any],
               layers: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray, Reach]], lo: np.ndarray,
               hi: np.ndarray, base: np.ndarray, names: dict[str, np.ndarray],
               nvtx_sweep: bool) -> tuple[Pieces, Pieces | None] | None:
    """``_flatten`` by the C sweep (``_btree.flatten``: no per-source innermost, difference and
    interleave passes), its pieces clipped to the windows (what the sums read of them); None where
    ``_c_layers`` leaves the layer to ``_flatten``."""
    wl, wh = iv.merge(lo, hi)
    got = _c_layers(layers, int(wl[0]), int(wh[-1]), base, names, nvtx_sweep, (wl, wh))
    if got is None:
        return None
    s_, e_, c_ = (np.frombuffer(b, dtype=np.int64) for b in fast(got[0], wl, wh))
    return (s_, e_, c_), got[1]


def _c_layers(layers: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray, Reach]], first: int, last: int,
              base: np.ndarray, names: dict[str, np.ndarray], nvtx_sweep: bool,
              merged: tuple[np.ndarray, np.ndarray]) -> tuple[list[tuple[Any, ...]], Pieces | None] | None:
    """The C sweep's layers (st, en, codes, code offset, r0, r1) for windows from ``first`` to
    ``last``, and the NVTX ranges left to the per-window sweep (or None); fills ``names``. Each source
    gives the rows that may touch the windows: from the first still running when the first window
    opens to the last starting before the last one closes. NVTX ranges swept window by window
    (``nvtx_sweep``) are cut down (``_touching`` on the sorted, disjoint ``merged`` windows) as
    ``_flatten`` does; None
    (``_flatten`` then) where ``_flatten`` would sweep them on its own: more than ``INNERMOST_MAX``
    ranges that may touch the windows."""
    given: list[tuple[Any, ...]] = []
    swept: Pieces | None = None
    for source, st, en, codes, cats, reach in layers:
        r1 = int(np.searchsorted(st, last, side="left"))
        r0 = min(reach.first_above(first), r1)
        if r1 == r0:
            continue
        names[source] = cats
        if source == "nvtx" and nvtx_sweep:
            swept = _touching_rows(st, en, np.asarray(codes), reach, *merged)
            continue
        if source == "nvtx" and r1 - r0 > INNERMOST_MAX:
            return None
        given.append((st, en, int_buffer(codes), int(base[SOURCES.index(source)] + 1), r0, r1))
    return given, swept


def _by_source(w: np.ndarray, c: np.ndarray, v: np.ndarray,
               base: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Entries of combined codes (``base[source] + code + 1``) as (window, source index, code, ns)."""
    si = (np.searchsorted(base, c, side="right") - 1).astype(np.int8)
    return w, si, c - base[si] - 1, v


def _flat_sums(flat: tuple[np.ndarray, np.ndarray, np.ndarray], lo: np.ndarray, hi: np.ndarray,
               base: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The flattened layer's time per (window, source, name): (window, source index, code, ns)."""
    st, en, comb = flat
    i0 = iv.search(en, lo, side="right")  # disjoint: ends are sorted as the starts are
    i1 = iv.search(st, hi, side="left")
    w, _, c, v = range_sums(0, st, en, comb, int(base[-1]), lo, hi, i0, i1, None, False)
    del i0, i1, st, en, comb
    return _by_source(np.asarray(w), np.asarray(c, dtype=np.int64), np.asarray(v, dtype=np.int64), base)


def _swept_sums(swept: tuple[np.ndarray, np.ndarray, np.ndarray], flat: tuple[np.ndarray, np.ndarray, np.ndarray],
                lo: np.ndarray, hi: np.ndarray,
                detail: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The swept NVTX ranges' time per (window, name), the ``detail`` windows one at a time (all when
    None): innermost NVTX segments of the window minus the calls (``flat``); None when there is none."""
    empty = np.empty(0, np.int64)
    s_all, e_all, c_all = swept
    above = iv.merge(flat[0], flat[1])  # the calls' union
    reach = Reach(e_all)
    ws: list[int] = []
    cs: list[int] = []
    vs: list[int] = []
    for w_ in (range(len(lo)) if detail is None else sorted(detail.tolist())):
        a, b = int(lo[w_]), int(hi[w_])
        j0 = reach.first_above(a)
        j1 = int(np.searchsorted(s_all, b, side="left"))
        sel = j0 + np.flatnonzero(e_all[j0:j1] > a) if j1 > j0 else empty
        if sel.size == 0:
            continue
        s, e = np.clip(s_all[sel], a, b), np.clip(e_all[sel], a, b)
        s, e, owner = iv.innermost(s, e)
        s, e, code = _minus(s, e, c_all[sel][owner], *iv.clip_merged(*above, a, b))
        if s.size == 0:
            continue
        uc, inv = np.unique(code, return_inverse=True)
        tot = np.bincount(inv, weights=e - s).astype(np.int64)
        ws += [w_] * len(uc)
        cs += uc.tolist()
        vs += tot.tolist()
    if not ws:
        return None
    return (np.array(ws, np.int64), np.full(len(ws), SOURCES.index("nvtx"), np.int8),
            np.array(cs, np.int64), np.array(vs, np.int64))


def _entries_by_window(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
                       n_windows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The parts' entries joined, those with time kept, grouped by window (stable): (win, source
    index, code, ns); windows and codes as int32 where they fit."""
    narrow = np.int32 if n_windows < 1 << 31 else np.int64
    win: np.ndarray = np.concatenate([p[0] for p in parts]).astype(narrow, copy=False)
    src = np.concatenate([p[1] for p in parts]).astype(np.int8, copy=False)
    code = np.concatenate([p[2] for p in parts]).astype(narrow, copy=False)
    ns = np.concatenate([p[3] for p in parts]).astype(np.int64, copy=False)
    del parts[:]
    keep = ns > 0
    if bool(keep.all()):
        if bool((win[1:] >= win[:-1]).all()):
            return win, src, code, ns
        order = np.argsort(win, kind="stable")
    else:
        order = np.flatnonzero(keep)
        order = order[np.argsort(win[order], kind="stable")]
    return win[order], src[order], code[order], ns[order]

REACH_BLOCK = 4096  # rows per block of Reach's prefix maxima


class Reach:
    """The running maximum of the ends ``en`` of start-sorted calls (the calls before
    ``searchsorted(reach, x, "right")`` all end by x), searched without an int64 copy of every row
    (28 MiB on the 245 MB trace's CUDA API and OS runtime calls, held through the gap explanation):
    the ends themselves when they are in order (calls that never nest), else the prefix maxima of
    blocks of ``REACH_BLOCK`` rows, and the exact running maximum only over the rows a search needs."""

    def __init__(self, en: np.ndarray) -> None:
        self.en = en
        self.blocks: np.ndarray | None = None  # None: the ends are in order
        if en.size > 1 and not bool((en[1:] >= en[:-1]).all()):
            n = en.size // REACH_BLOCK * REACH_BLOCK
            b = en[:n].reshape(-1, REACH_BLOCK).max(axis=1)
            if n < en.size:
                b = np.append(b, en[n:].max())
            self.blocks = np.maximum.accumulate(b)

    def first_above(self, x: int) -> int:
        """The first row whose end is after ``x`` (where the running maximum first exceeds it), or
        the row count."""
        if self.blocks is None:  # ends in order: they are their own running maximum
            return int(np.searchsorted(self.en, x, side="right"))
        b = int(np.searchsorted(self.blocks, x, side="right"))  # all rows before block b end by x
        if b >= len(self.blocks):
            return int(self.en.size)
        lo = b * REACH_BLOCK
        return lo + int(np.argmax(self.en[lo:lo + REACH_BLOCK] > x))

    def search(self, x: np.ndarray, stop: int) -> np.ndarray:
        """``searchsorted(running maximum of en, x, "right")``: with ends in order, on the ends
        themselves; else capped at ``stop`` (answers past it come out as ``stop``), from the exact
        running maximum between the first row ending after ``min(x)`` and ``stop`` (every row before
        that first one ends by each ``x``)."""
        if self.blocks is None:
            return iv.search(self.en, x, side="right")
        if len(x) == 0:
            return np.zeros(0, np.int64)
        first = min(self.first_above(int(x.min())), stop)
        part = np.maximum.accumulate(self.en[first:stop])
        out = iv.search(part, x, side="right")
        out += first
        return out


def _touching_rows(st: np.ndarray, en: np.ndarray, codes: np.ndarray, reach: Reach, wl: np.ndarray,
                   wh: np.ndarray) -> Pieces | None:
    """The calls (starts, ends, codes) that ``_touching`` keeps (all of them where it keeps every
    call), or None when none touches a window."""
    rows = _touching(st, en, reach, wl, wh)
    if rows is None:
        return st, en, codes
    return (st[rows], en[rows], codes[rows]) if rows.size else None


def _touching(st: np.ndarray, en: np.ndarray, reach: Reach, wl: np.ndarray, wh: np.ndarray) -> np.ndarray | None:
    """The rows (ascending) of the start-sorted calls [st, en) that overlap any of the disjoint,
    sorted windows [wl, wh); None for all of them when the windows are about as many as the calls
    (every gap of a launch loop: nearly every call touches one, so filtering costs more than it
    saves) and the calls never overlap (calls touching no window add 0 to every window).
    ``reach``: the running maximum of ``en``."""
    if len(wl) * 4 >= len(st) and not (st.size > 1 and not bool((st[1:] >= en[:-1]).all())):
        return None
    # candidates per window: from the first call that may still run at its start to the last
    # starting before its end (O(log n) each), then the exact overlap test; a window's first
    # candidate capped at the last call starting before any window ends changes no candidate
    i1 = iv.search(st, wh, side="left")
    i0 = reach.search(wl, int(i1.max()) if len(i1) else 0)
    n = int(np.maximum(i1 - i0, 0).sum())
    if n == 0:
        return np.empty(0, np.int64)
    if n <= len(st) * REACH_MAX_SHARE:
        win, rows = spans(i0, i1)
        del i0, i1
        hit = np.zeros(len(st), dtype=bool)  # distinct rows in order, without a sort
        hit[rows[en[rows] > wl[win]]] = True
        del win
    else:  # a long call early on keeps the running maximum high: test every call instead
        del i0, i1
        j = iv.search(wh, st, side="right")  # first window ending after st
        np.minimum(j, len(wh) - 1, out=j)
        hit = st < wh[j]
        hit &= wl[j] < en
        del j
    return np.flatnonzero(hit)


def _minus(st: np.ndarray, en: np.ndarray, codes: np.ndarray, ms: np.ndarray,
           me: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint, start-sorted labelled segments [st, en) (``codes``) minus the merged set [ms, me):
    the pieces left, start-sorted, each with its segment's code; empty pieces dropped. Each
    segment's pieces are the gaps of the merged set that overlap it (two binary searches), clipped."""
    if st.size == 0 or ms.size == 0:
        keep = en > st
        return (st, en, codes) if bool(keep.all()) else (st[keep], en[keep], codes[keep])
    big = np.iinfo(np.int64)
    cs = np.concatenate([np.array([big.min], np.int64), me])  # the set's complement: before, between, after
    ce = np.concatenate([ms, np.array([big.max], np.int64)])
    j0 = iv.search(ce, st, side="right")  # first hole ending after the segment starts
    j1 = iv.search(cs, en, side="left")  # first hole starting at or after it ends
    seg, j = spans(j0, j1)
    del j0, j1
    s = np.maximum(st[seg], cs[j])
    e = np.minimum(en[seg], ce[j])
    keep = e > s
    return s[keep], e[keep], codes[seg[keep]]
