"""The gap explanation's two C passes over windows, each with its numpy twin (the same arrays):
``range_sums`` (``_btree.clipped_sums``: clipped call time per window and name) and
``window_best`` / ``window_best_numpy`` (``_btree.window_best``: each window's best entry and sync flag)."""

from __future__ import annotations

import numpy as np

from nsysan._native import c_pass, int_buffer


def spans(i0: np.ndarray, i1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every index in each range [i0[w], i1[w]) (empty where i1 <= i0), with its range number w."""
    k = np.maximum(i1 - i0, 0)
    n = int(k.sum())
    return np.repeat(np.arange(len(k)), k), np.repeat(i0 - (np.cumsum(k) - k), k) + np.arange(n)


def range_sums(source: int, st: np.ndarray, en: np.ndarray, codes: np.ndarray, n_names: int, lo: np.ndarray,
               hi: np.ndarray, i0: np.ndarray, i1: np.ndarray, rows: np.ndarray | None,
               ending_after_lo: bool) -> tuple[np.ndarray, ...]:
    """``clipped_sums`` of the calls in each window's range [i0[w], i1[w]) (positions into ``rows``
    when given, else calls), with ``ending_after_lo`` only the calls ending after the window opens;
    ``source``: the source index each entry carries, ``n_names``: how many name codes there are.
    In one C pass when the extension has it (``_btree.clipped_sums``: no array of one entry per
    (window, call) pair), else with numpy; the same arrays."""
    fast = c_pass("clipped_sums")
    if fast is None:
        win, idx = spans(i0, i1)
        if rows is not None:
            idx = rows[idx]
        if ending_after_lo:
            hit = en[idx] > lo[win]
            win, idx = win[hit], idx[hit]
        return clipped_sums(source, st, en, codes, n_names, lo, hi, win, idx)

    def i64(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x, dtype=np.int64)

    # the name codes in their own width (a categorical's int8/int16: no int64 copy of every call's);
    # windows and codes come back as int32
    w, c, v = (np.frombuffer(b, dtype=t) for b, t in zip(fast(
        i64(st), i64(en), int_buffer(codes), i64(lo), i64(hi), i64(i0), i64(i1), None if rows is None else i64(rows),
        ending_after_lo), (np.int32, np.int32, np.int64)))
    return w, np.full(len(w), source, np.int8), c, v


def clipped_sums(source: int, st: np.ndarray, en: np.ndarray, codes: np.ndarray, n_names: int, lo: np.ndarray,
                 hi: np.ndarray, win: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, ...]:
    """Clipped time of calls ``idx`` in windows ``win``, summed per (window, name): (window,
    source index, name code, ns), ordered by window then code. The numpy twin of ``_btree.clipped_sums``."""
    if idx.size == 0:
        e = np.empty(0, np.int64)
        return e, e, e, e
    dur = np.minimum(en[idx], hi[win]) - np.maximum(st[idx], lo[win])
    width = n_names + 1
    key = win * width + (codes[idx].astype(np.int64) + 1)
    # windows come in order, so the keys nearly are: a stable sort of them is almost free, where
    # np.unique's sort is not (0.5 s on 3M keys)
    order = np.argsort(key, kind="stable")
    sk = key[order]
    first = np.flatnonzero(np.concatenate([[True], sk[1:] != sk[:-1]]))
    keys = sk[first]
    tot = np.add.reduceat(dur[order], first).astype(np.int64)
    return keys // width, np.full(len(keys), source, np.int8), keys % width - 1, tot


def window_best(result: tuple[bytes, bytes]) -> tuple[np.ndarray, np.ndarray]:
    """``_btree.window_best``'s bytes as arrays: best entry per window (-1 none), sync flag."""
    return np.frombuffer(result[0], dtype=np.int64), np.frombuffer(result[1], dtype=np.uint8).astype(bool)


def window_groups(win: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ``win`` grouped (ascending): each group's first entry, and each entry's group number."""
    change = np.empty(len(win), dtype=bool)
    change[:1] = False
    np.not_equal(win[1:], win[:-1], out=change[1:])
    gid = np.cumsum(change, dtype=np.int32 if len(win) < 1 << 31 else np.int64)
    change[:1] = True
    return np.flatnonzero(change), gid


def best_per_window(win: np.ndarray, ns: np.ndarray, mask: np.ndarray | None = None,
                    groups: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per window (``win`` grouped, ascending), the entry with the most ns among the entries in
    ``mask`` (ties: the first entry): (windows, entry indices). Linear: one reduceat per group.
    ``groups``: ``window_groups(win)``, when the caller has it already."""
    if len(win) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    v = ns if mask is None else np.where(mask, ns, -1)
    first, gid = groups if groups is not None else window_groups(win)
    mx = np.maximum.reduceat(v, first)
    hit = np.flatnonzero((v == mx[gid]) & (v >= 0))
    if hit.size == 0:
        return hit, hit
    g = gid[hit]
    one = np.concatenate([[True], g[1:] != g[:-1]])
    return win[hit[one]], hit[one]


def window_best_numpy(win: np.ndarray, src: np.ndarray, code: np.ndarray, ns: np.ndarray, sp: np.ndarray,
                      sync_code: np.ndarray, share: float) -> tuple[np.ndarray, np.ndarray]:
    """``_btree.window_best`` with numpy (where the extension is not built): per window, the best
    entry (-1 none) -- a CUDA API, else an OS runtime entry covering over half of it, else the
    largest entry if it covers at least ``share`` of it -- and whether its synchronization calls
    cover over half of it."""
    is_cuda = src == 0
    sync_e = np.zeros(len(win), dtype=bool)
    c = code[is_cuda].astype(np.int64)
    sync_e[is_cuda] = sync_code[np.where(c >= 0, c, len(sync_code) - 1)]
    # the synchronization calls' time per window (adding the other entries' zeros changes no sum)
    sync_ns = np.bincount(win[sync_e], weights=ns[sync_e], minlength=len(sp))
    del sync_e
    best = np.full(len(sp), -1, dtype=np.int64)
    wg = window_groups(win)
    for si in (0, 1):  # a CUDA API or OS runtime call covering over half the gap
        w, e = best_per_window(win, ns, src == si, wg)
        ok = (ns[e] * 2 > sp[w]) & (best[w] < 0)
        best[w[ok]] = e[ok]
    w, e = best_per_window(win, ns, groups=wg)
    del wg
    ok = (ns[e] >= share * sp[w]) & (best[w] < 0)
    best[w[ok]] = e[ok]
    return best, sync_ns * 2 > sp
