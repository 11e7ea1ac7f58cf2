"""Interval math on int64 nanosecond [start, end) intervals. Pure numpy (``search`` and ``union`` use the C
extension when it is built, with the same results); inputs are never mutated."""

from __future__ import annotations

import numpy as np

from nsysan._native import c_pass
from nsysan._native.search import search  # noqa: F401 - lives with its C pass; read here as iv.search

Array = np.ndarray


def merge(starts: Array, ends: Array) -> tuple[Array, Array]:
    """Union of intervals as sorted, disjoint (starts, ends). Touching intervals are merged. When the
    inputs are that already, they are returned themselves (not copies): treat the result as read-only."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    if s.size == 0:
        return s.copy(), e.copy()
    if s.size > 1 and not bool((s[1:] >= s[:-1]).all()):  # GPU ops arrive sorted: skip the sort then
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    if bool((s[1:] > e[:-1]).all()) and bool((e >= s).all()):
        # already disjoint and apart (each op alone between idle gaps: a launch loop's kernels):
        # the inputs are the union; returned as they are, no copies (callers never write to them)
        return s, e
    run_end = np.maximum.accumulate(e)
    new_group = np.empty(s.size, dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new_group)
    ms = s[idx]
    me = np.maximum.reduceat(e, idx)
    return ms, me


def total(starts: Array, ends: Array) -> int:
    """Length of the union."""
    if len(starts) <= 16:  # tiny sets (per-gap look-ups): a Python sweep beats numpy's call overhead
        acc, cur_s, cur_e = 0, None, None
        for a, b in sorted(zip(np.asarray(starts).tolist(), np.asarray(ends).tolist())):
            if cur_e is None or a > cur_e:
                if cur_e is not None:
                    acc += cur_e - cur_s
                cur_s, cur_e = a, b
            elif b > cur_e:
                cur_e = b
        return int(acc + (cur_e - cur_s if cur_e is not None else 0))
    ms, me = merge(starts, ends)
    return int((me - ms).sum())


def innermost_time(starts: Array, ends: Array) -> Array:
    """The time each interval is the innermost one (``innermost``'s segments summed per owner: the
    latest-starting interval open, ties to the later index). ``starts`` must be sorted."""
    seg_s, seg_e, owner = innermost(starts, ends)
    owned = np.zeros(np.asarray(starts).size, dtype=np.int64)
    np.add.at(owned, owner, seg_e - seg_s)
    return owned


INNERMOST_LOOP_MAX = 32  # up to this many intervals, ``innermost`` is the stack loop (numpy's fixed cost is more)
INNERMOST_ROUNDS = 64  # ``innermost``'s numpy passes before it hands a deeply nested set to the stack loop


def innermost(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint segments (starts, ends, owner) covering the union of possibly nested intervals, each
    owned by the latest-starting interval open over it (ties: the later index), adjacent pieces of
    one owner joined; int64 arrays. ``starts`` must be sorted. Time attributed per owner equals each
    interval's length minus what later-starting intervals cover of it: the "innermost NVTX range"
    rule, as one sweep instead of one per window.

    Numpy passes, as many as the intervals nest deep: an interval that overlaps no other is its own
    segment, the others go to ``_innermost_nested``. Up to ``INNERMOST_LOOP_MAX`` intervals, and past
    ``INNERMOST_ROUNDS`` passes (intervals nested that deep), one pass with a stack
    (``_innermost_loop``) gives the same segments."""
    st = np.asarray(starts, dtype=np.int64)
    en = np.asarray(ends, dtype=np.int64)
    n = st.size
    if n <= INNERMOST_LOOP_MAX:
        return _innermost_loop(st, en)
    if n < 2:
        return _innermost_nested(st, en)
    # alone: no earlier call still open at its start, and none starting before it ends
    run = np.maximum.accumulate(en)
    alone = np.empty(n, dtype=bool)
    alone[0] = True
    np.greater_equal(st[1:], run[:-1], out=alone[1:])
    del run
    alone[:-1] &= alone[1:]
    if int(np.count_nonzero(alone)) * 4 < n:
        return _innermost_nested(st, en)
    nested = np.flatnonzero(~alone)
    alone &= en > st
    one = np.flatnonzero(alone)
    del alone
    ns_, ne_, no_ = _innermost_nested(st[nested], en[nested])
    no_ = nested[no_]
    del nested
    # the two sets of segments never overlap: one start-sorted list by where each lone call falls
    return interleave((ns_, ne_, no_), (st[one], en[one], one))


def _innermost_nested(st: np.ndarray, en: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``innermost`` of int64 ``st`` (sorted) and ``en``, for calls that nest or overlap: at every
    distinct bound b the owner is the latest-starting interval open there, max{i: st[i] <= b < en[i]};
    runs of one owner are joined. It is found by walking back from the last interval starting by b
    along "previous later end" links (each interval's nearest earlier one ending after it: the
    intervals skipped all end no later, so none is open at b), all bounds at once, one link a pass:
    as many passes as the calls nest deep. The links come from the same walk, by pointer jumping."""
    n = st.size
    if n == 0:
        return st.copy(), en.copy(), np.empty(0, dtype=np.int64)
    # up[i]: the nearest i' < i with en[i'] > en[i] (-1: none); none where en[i] is the running maximum
    up = np.arange(-1, n - 1, dtype=np.int64)
    act = np.flatnonzero(en[1:] >= en[:-1]) + 1  # the previous interval ends no later: look further back
    run = np.maximum.accumulate(en)
    top = en[act] >= run[act - 1]
    up[act[top]] = -1
    act = act[~top]
    del run, top
    # (every interval between up[i] and i ends no later than i, so jumping over up[up[i]]'s keeps it so)
    if not _walk_back(up, act, up, en, en):
        return _innermost_loop(st, en)
    # the distinct bounds (starts, then ends: two sorted runs, or nearly, which a stable sort merges)
    b = np.sort(np.concatenate([st, en]), kind="stable")
    if b.size > 1:
        new = np.empty(b.size, dtype=bool)
        new[0] = True
        np.not_equal(b[1:], b[:-1], out=new[1:])
        b = b[new]
        del new
    if b.size < 2:
        empty = np.empty(0, np.int64)
        return empty, empty.copy(), empty.copy()
    own = search(st, b[:-1], side="right")  # the last interval starting by each bound
    own -= 1
    q = np.flatnonzero(own >= 0)
    q = q[en[own[q]] <= b[q]]  # closed by then: walk back
    if not _walk_back(own, q, up, en, b):
        return _innermost_loop(st, en)
    # own[k] holds [b[k], b[k + 1]): runs of one owner joined, the unowned dropped
    first = np.empty(own.size, dtype=bool)
    first[0] = True
    np.not_equal(own[1:], own[:-1], out=first[1:])
    at = np.flatnonzero(first)
    del first
    stop = b[np.append(at[1:], own.size)]
    who = own[at]
    keep = who >= 0
    return b[at[keep]], stop[keep], who[keep]


def _walk_back(ptr: np.ndarray, idx: np.ndarray, step: np.ndarray, en: np.ndarray, bound: np.ndarray) -> bool:
    """``_innermost_nested``'s walk, in place: while the interval ``ptr[i]`` (i in ``idx``) ends by
    ``bound[i]``, move it one link back (``ptr[i] = step[ptr[i]]``; -1: none), all of ``idx`` a pass.
    False when that takes more than ``INNERMOST_ROUNDS`` passes (calls nested that deep)."""
    for _ in range(INNERMOST_ROUNDS + 1):
        if not idx.size:
            return True
        nxt = step[ptr[idx]]
        ptr[idx] = nxt
        idx = idx[nxt >= 0]
        idx = idx[en[ptr[idx]] <= bound[idx]]
    return False


def interleave(a: tuple[np.ndarray, np.ndarray, np.ndarray],
                b: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two start-sorted sets of disjoint, non-empty pieces (starts, ends, codes), disjoint from each
    other, as one start-sorted set: each piece of ``b`` goes where its start falls among ``a``'s (one
    search, no sort)."""
    if a[0].size == 0:
        return b
    at = search(a[0], b[0], side="left")
    at += np.arange(b[0].size, dtype=np.int64)
    total = a[0].size + b[0].size
    rest = np.ones(total, dtype=bool)
    rest[at] = False
    rest_at = np.flatnonzero(rest)
    del rest
    out = []
    for x, y in zip(a, b):
        col = np.empty(total, dtype=np.int64)
        col[rest_at] = x
        col[at] = y
        out.append(col)
    return out[0], out[1], out[2]


def _innermost_loop(starts: Array, ends: Array) -> tuple[Array, Array, Array]:
    """``innermost`` by one pass with a stack over the intervals (``starts`` sorted): for few
    intervals, and for sets nested deeper than ``INNERMOST_ROUNDS``."""
    st = np.asarray(starts, dtype=np.int64)
    en = np.asarray(ends, dtype=np.int64)
    if st.size == 0:
        return st.copy(), en.copy(), np.empty(0, dtype=np.int64)
    st_l, en_l = st.tolist(), en.tolist()
    out_s: list[int] = []
    out_e: list[int] = []
    out_o: list[int] = []
    stack: list[int] = []
    t = 0
    for i, s in enumerate(st_l + [None]):  # None: past the last start, drain the stack
        while stack:
            top = stack[-1]
            e = en_l[top]
            if e <= t:  # closed (or empty): owns nothing more
                stack.pop()
                continue
            stop = e if s is None or e < s else s
            if stop > t:
                if out_o and out_o[-1] == top and out_e[-1] == t:
                    out_e[-1] = stop
                else:
                    out_s.append(t)
                    out_e.append(stop)
                    out_o.append(top)
                t = stop
            if e <= t:
                stack.pop()
                continue
            break
        if s is None:
            break
        t = s
        stack.append(i)
    return (np.array(out_s, dtype=np.int64), np.array(out_e, dtype=np.int64), np.array(out_o, dtype=np.int64))


def clip(starts: Array, ends: Array, lo: int, hi: int) -> tuple[Array, Array]:
    """Intervals clipped to [lo, hi); empty ones dropped. The inputs themselves when nothing is cut or
    dropped (no copy of a million claims): treat the result as read-only."""
    s, e = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    if len(s) and int(s.min()) >= lo and int(e.max()) <= hi:
        keep = e > s
        return (s, e) if bool(keep.all()) else (s[keep], e[keep])
    s, e = np.clip(s, lo, hi), np.clip(e, lo, hi)
    keep = e > s
    return s[keep], e[keep]


def union(a: tuple[Array, Array], b: tuple[Array, Array]) -> tuple[Array, Array]:
    """Union of two *merged* sets as a merged set: b's intervals placed among a's by binary search
    (no concatenation and sort of both)."""
    (a_s, a_e), (b_s, b_e) = a, b
    if len(b_s) == 0 or len(a_s) == 0:
        return merge(a_s, a_e) if len(b_s) == 0 else merge(b_s, b_e)
    fast = c_pass("union_merged")
    if fast is not None:  # one walk of both in C (``_btree.union_merged``): the same set
        out_s, out_e = np.empty(len(a_s) + len(b_s), np.int64), np.empty(len(a_s) + len(b_s), np.int64)
        k = fast(*(np.ascontiguousarray(x, dtype=np.int64) for x in (a_s, a_e, b_s, b_e)), out_s, out_e)
        return out_s[:k], out_e[:k]
    n = len(a_s) + len(b_s)
    at = np.searchsorted(a_s, b_s, side="right")
    at += np.arange(len(b_s))  # b's positions in the sorted union
    s, e = np.empty(n, np.int64), np.empty(n, np.int64)
    s[at], e[at] = b_s, b_e
    rest = np.ones(n, dtype=bool)
    rest[at] = False
    s[rest], e[rest] = a_s, a_e
    del rest, at
    return merge(s, e)


def clip_merged(starts: Array, ends: Array, lo: int, hi: int) -> tuple[Array, Array]:
    """``clip`` for merged intervals (sorted, disjoint, as ``merge`` returns them): the intervals
    overlapping the window are one slice (two binary searches), and only its first start and last
    end can need clipping. A view when nothing is cut: no pass over a million intervals per window."""
    s, e = np.asarray(starts), np.asarray(ends)
    if hi <= lo:  # an empty window holds nothing (not a zero-length piece of the interval around it)
        return np.empty(0, np.int64), np.empty(0, np.int64)
    i0 = int(np.searchsorted(e, lo, side="right"))  # first interval ending after lo
    i1 = int(np.searchsorted(s, hi, side="left"))  # first interval starting at or after hi
    if i1 <= i0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    s, e = s[i0:i1], e[i0:i1]
    if not bool((e > s).all()):  # zero-length intervals (0 ns ops): clip() drops them
        return clip(s, e, lo, hi)
    if s[0] < lo:
        s = s.copy()
        s[0] = lo
    if e[-1] > hi:
        e = e.copy()
        e[-1] = hi
    return s, e


def intersect(a: tuple[Array, Array], b: tuple[Array, Array]) -> tuple[Array, Array]:
    """Intersection of two *merged* interval sets (each sorted and disjoint)."""
    a_s, a_e = a
    b_s, b_e = b
    if a_s.size == 0 or b_s.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return _intersect_pairs(a_s, a_e, b_s, b_e) if a_s.size >= b_s.size else _intersect_pairs(b_s, b_e, a_s, a_e)


def _intersect_pairs(a_s: Array, a_e: Array, b_s: Array, b_e: Array) -> tuple[Array, Array]:
    """Intersection of merged sets a and b (b the smaller): for each interval of b, the intervals of
    a that overlap it, found by two binary searches (a's starts and ends are both sorted), and the
    overlap of each pair. Pieces come out sorted (b's intervals in order, a's within each): no sort
    and no sweep over every boundary point of both sets."""
    i0 = search(a_e, b_s, side="right")  # the first interval of a ending after b's interval starts
    i1 = search(a_s, b_e, side="left")  # the first starting at or after it ends
    cnt = np.maximum(i1 - i0, 0)
    del i1
    n = int(cnt.sum())
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if n <= PAIR_CHUNK:
        return _pieces(a_s, a_e, b_s, b_e, i0, cnt)
    # many pairs (a few long intervals over a million short ones): b's intervals a chunk of about
    # PAIR_CHUNK pairs at a time, the pieces written into one output (the per-pair temporaries of
    # one chunk, not of all pairs)
    out_s, out_e = np.empty(n, np.int64), np.empty(n, np.int64)
    cuts = np.searchsorted(np.cumsum(cnt), np.arange(PAIR_CHUNK, n, PAIR_CHUNK), side="left") + 1
    bounds = np.unique(np.concatenate([[0], np.minimum(cuts, len(b_s)), [len(b_s)]]))
    at = 0
    for j0, j1 in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        s, e = _pieces(a_s, a_e, b_s[j0:j1], b_e[j0:j1], i0[j0:j1], cnt[j0:j1])
        out_s[at:at + len(s)], out_e[at:at + len(s)] = s, e
        at += len(s)
    return out_s[:at], out_e[:at]


PAIR_CHUNK = 1 << 18  # overlapping pairs handled at once by _intersect_pairs


def _pieces(a_s: Array, a_e: Array, b_s: Array, b_e: Array, i0: Array, cnt: Array) -> tuple[Array, Array]:
    """The overlaps of b's intervals with the ``cnt`` intervals of a from ``i0`` on (each b's), in order."""
    n = int(cnt.sum())
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    jj = np.repeat(np.arange(len(b_s)), cnt)
    first = np.cumsum(cnt) - cnt  # each b interval's first pair
    ii = i0[jj] + (np.arange(n) - first[jj])
    del first
    s = np.maximum(a_s[ii], b_s[jj])
    e = np.minimum(a_e[ii], b_e[jj])
    del ii, jj
    keep = e > s
    return (s, e) if bool(keep.all()) else (s[keep], e[keep])


def subtract(a: tuple[Array, Array], b: tuple[Array, Array]) -> tuple[Array, Array]:
    """Merged set ``a`` minus merged set ``b`` (a merged set)."""
    if len(b[0]) == 0 or len(a[0]) == 0:
        return a
    (a_s, a_e), (b_s, b_e) = a, b
    hs, he = b_e[:-1], b_s[1:]  # b's holes: views of its columns (no copy of a million intervals)
    keep = he > hs
    if not bool(keep.all()):
        hs, he = hs[keep], he[keep]
    del keep
    mid = intersect(a, (hs, he))
    k = int(np.searchsorted(a_s, b_s[0], side="left"))  # a before b's first interval
    j = int(np.searchsorted(a_e, b_e[-1], side="right"))  # a after b's last one
    if k == 0 and j == len(a_e):
        return mid
    ls, le = a_s[:k], np.minimum(a_e[:k], b_s[0])
    rs, re_ = np.maximum(a_s[j:], b_e[-1]), a_e[j:]
    lk, rk = le > ls, re_ > rs  # (empty pieces dropped, as the intersection drops them)
    return (np.concatenate([ls[lk], mid[0], rs[rk]]), np.concatenate([le[lk], mid[1], re_[rk]]))


def _depth(keys: Array) -> Array:
    """Intervals open after each of the sorted ``sweep_keys`` (+1 at a start, -1 at an end), with one
    temporary array (these sweeps run over millions of points)."""
    d = keys & 1
    d *= 2
    d -= 1
    return np.cumsum(d, out=d)


def sweep_keys(sets: list[tuple[Array, Array]]) -> Array:
    """The boundary points of interval sets as sorted ``point << 1 | is_start`` keys (at equal
    points ends sort before starts; times stay far below 2^62 ns). Each set's keys, interleaved,
    are already in order when the set is merged (sorted, disjoint), so the sort is a merge of
    sorted runs (timsort), not a sort of all points."""
    keys = np.empty(2 * sum(len(s) for s, _ in sets), dtype=np.int64)
    at = 0
    for s, e in sets:
        k = keys[at:at + 2 * len(s)]
        np.left_shift(np.asarray(s, dtype=np.int64), 1, out=k[0::2])
        k[0::2] |= 1
        np.left_shift(np.asarray(e, dtype=np.int64), 1, out=k[1::2])
        at += 2 * len(s)
    keys.sort(kind="stable")
    return keys


def gaps(ms: Array, me: Array) -> tuple[Array, Array]:
    """The holes between consecutive merged intervals."""
    if ms.size < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return me[:-1].copy(), ms[1:].copy()


def covered_before(ms: Array, me: Array, t: Array) -> Array:
    """For merged intervals, the covered length before each time ``t`` (any order)."""
    t = np.asarray(t, dtype=np.int64)
    if ms.size == 0:
        return np.zeros(t.shape, dtype=np.int64)
    return _covered_before(ms, me, np.concatenate([[0], np.cumsum(me - ms)]), t)


def _covered_before(ms: Array, me: Array, cum_end: Array, t: Array) -> Array:
    i = np.searchsorted(ms, t, side="right")  # intervals starting at or before t
    full = cum_end[np.maximum(i - 1, 0)]
    partial = np.where(i > 0, np.minimum(t, me[np.maximum(i - 1, 0)]) - ms[np.maximum(i - 1, 0)], 0)
    return np.where(i > 0, full + np.maximum(partial, 0), 0)


def covered_between(ms: Array, me: Array, lo: Array, hi: Array) -> Array:
    """For merged intervals, the covered length inside each [lo[i], hi[i])."""
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    if ms.size == 0:
        return np.zeros(np.broadcast_shapes(lo.shape, hi.shape), dtype=np.int64)
    cum_end = np.concatenate([[0], np.cumsum(me - ms)])  # once for both ends
    return _covered_before(ms, me, cum_end, hi) - _covered_before(ms, me, cum_end, lo)


def sums_between(times: Array, lo: Array, hi: Array, values: Array | None = None) -> Array:
    """Per window (lo[i], hi[i]]: how many of the point events at ``times`` fall in it, or with
    ``values`` the sum of their values (int64). ``times`` need not be sorted."""
    t = np.asarray(times, dtype=np.int64)
    o = np.argsort(t, kind="stable")
    t = t[o]
    if values is None:
        return np.searchsorted(t, hi, side="right") - np.searchsorted(t, lo, side="right")
    c = np.concatenate([[0], np.cumsum(np.asarray(values, dtype=np.int64)[o], dtype=np.int64)])
    return c[np.searchsorted(t, hi, side="right")] - c[np.searchsorted(t, lo, side="right")]


def coverage_in_bins(ms: Array, me: Array, edges: Array) -> Array:
    """For merged intervals, the covered length inside each bin [edges[i], edges[i+1])."""
    edges = np.asarray(edges, dtype=np.int64)
    if ms.size == 0:
        return np.zeros(max(edges.size - 1, 0), dtype=np.int64)
    return np.diff(covered_before(ms, me, edges))


def max_open(runs: list[tuple[Array, Array]]) -> int:
    """Most intervals open at once over sets of disjoint, sorted intervals (one merged set per
    stream): a sweep over their ``sweep_keys``."""
    keys = sweep_keys(runs)
    return int(_depth(keys).max()) if len(keys) else 0


FEW_QUERIES = 20_000  # at most this many queries over at most SLICE_SHARE x the values: slices


SLICE_SHARE = 8


def min_max_over(lo_values: Array, hi_values: Array, lo: Array, hi: Array) -> tuple[Array, Array]:
    """``RangeMinMax(lo_values, hi_values).query(lo, hi)`` (requires hi > lo): the same minima and
    maxima. Few queries whose slices add up to a few passes over the values (4k NVTX ranges over a
    launch loop's 2M kernels) reduce each slice directly, without the structure's four arrays of
    the values' length (96 MB there)."""
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    n = len(lo_values)
    if len(lo) <= FEW_QUERIES and int((hi - lo).sum()) <= SLICE_SHARE * max(n, 1):
        lv, hv = np.asarray(lo_values), np.asarray(hi_values)
        pairs = list(zip(lo.tolist(), hi.tolist()))
        out_min = np.fromiter((lv[a:b].min() for a, b in pairs), dtype=np.int64, count=len(pairs))
        out_max = np.fromiter((hv[a:b].max() for a, b in pairs), dtype=np.int64, count=len(pairs))
        return out_min, out_max
    return RangeMinMax(lo_values, hi_values).query(lo, hi)


class RangeMinMax:
    """Min of ``lo_values`` and max of ``hi_values`` over index ranges [lo, hi).

    Blocks of ``block`` values: prefix and suffix min/max inside each block, and a sparse table over
    the block minima/maxima. A query spanning blocks is suffix + whole blocks + prefix (O(1)); a query
    inside one block reduces its few values directly. Memory is about 4n values, not the n log n of a
    sparse table over all values (that was 400 MB for 1.2M kernels)."""

    def __init__(self, lo_values: Array, hi_values: Array, block: int = 512) -> None:
        self.lo_v = np.asarray(lo_values, dtype=np.int64)
        self.hi_v = np.asarray(hi_values, dtype=np.int64)
        n = self.lo_v.size
        self.block = block
        nb = max(1, -(-n // block))
        pad = nb * block - n
        big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        lo_b = np.concatenate([self.lo_v, np.full(pad, big, np.int64)]).reshape(nb, block)
        hi_b = np.concatenate([self.hi_v, np.full(pad, small, np.int64)]).reshape(nb, block)
        self.pre_min = np.minimum.accumulate(lo_b, axis=1).reshape(-1)
        self.pre_max = np.maximum.accumulate(hi_b, axis=1).reshape(-1)
        # suffix min/max written in place through a reversed view (no reversed copy to flip back)
        self.suf_min = np.empty(nb * block, dtype=np.int64)
        self.suf_max = np.empty(nb * block, dtype=np.int64)
        np.minimum.accumulate(lo_b[:, ::-1], axis=1, out=self.suf_min.reshape(nb, block)[:, ::-1])
        np.maximum.accumulate(hi_b[:, ::-1], axis=1, out=self.suf_max.reshape(nb, block)[:, ::-1])
        self.bmins, self.bmaxs = [lo_b.min(axis=1)], [hi_b.max(axis=1)]
        k = 1
        while (1 << k) <= nb:
            half = 1 << (k - 1)
            pm, px = self.bmins[-1], self.bmaxs[-1]
            self.bmins.append(np.minimum(pm[:-half], pm[half:]))
            self.bmaxs.append(np.maximum(px[:-half], px[half:]))
            k += 1

    def _blocks(self, a: Array, b: Array) -> tuple[Array, Array]:
        """min/max over whole blocks [a, b), b > a."""
        k = np.floor(np.log2(np.maximum(b - a, 1))).astype(np.int64)
        out_min = np.empty(a.size, dtype=np.int64)
        out_max = np.empty(a.size, dtype=np.int64)
        for level in np.unique(k):
            sel = k == level
            out_min[sel] = np.minimum(self.bmins[level][a[sel]], self.bmins[level][b[sel] - (1 << level)])
            out_max[sel] = np.maximum(self.bmaxs[level][a[sel]], self.bmaxs[level][b[sel] - (1 << level)])
        return out_min, out_max

    def query(self, lo: Array, hi: Array) -> tuple[Array, Array]:
        """min of lo_values and max of hi_values over [lo, hi) for each pair; requires hi > lo."""
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        out_min = np.empty(lo.size, dtype=np.int64)
        out_max = np.empty(lo.size, dtype=np.int64)
        bl, bh = lo // self.block, (hi - 1) // self.block
        span = bl < bh
        if span.any():
            a, b = lo[span], hi[span] - 1
            m = np.minimum(self.suf_min[a], self.pre_min[b])
            x = np.maximum(self.suf_max[a], self.pre_max[b])
            inner = bh[span] - bl[span] > 1
            if inner.any():
                bm, bx = self._blocks(bl[span][inner] + 1, bh[span][inner])
                m[inner] = np.minimum(m[inner], bm)
                x[inner] = np.maximum(x[inner], bx)
            out_min[span], out_max[span] = m, x
        one = ~span
        if one.any():  # inside one block: reduce the (< block) values of each query directly
            a, b = lo[one], hi[one]
            length = b - a
            offsets = np.concatenate([[0], np.cumsum(length)[:-1]])
            idx = np.repeat(a - offsets, length) + np.arange(int(length.sum()))
            out_min[one] = np.minimum.reduceat(self.lo_v[idx], offsets)
            out_max[one] = np.maximum.reduceat(self.hi_v[idx], offsets)
        return out_min, out_max
