"""Steps within steps: which instances of a range enclose others of their name, which range runs inside
which, and the outer-or-inner decision between two qualifying ranges (``iterations/__init__``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.iterations.facts import _Facts
from nsysan.analyses.iterations.values import Candidate, Reason, Rejection

NEST_MIN = 0.75  # share of a range's instances inside another's for it to run inside it
REGULAR_MIN = 0.75  # share of the outer instances that hold the usual number of the inner range
MIN_OUTER = 5  # an outer range is the iteration over an inner one only when it repeats this often


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


def _outer_or_inner(ok: list[Candidate], rg: pd.DataFrame,
                    facts: _Facts) -> tuple[list[Candidate], dict[str, Rejection]]:
    """Steps within steps (see the module doc): of two qualifying ranges one of which runs inside the
    other, the outer one is the iteration when it holds the same number k >= 2 of the inner one each
    time (k micro-batches per optimizer step, L layers per step) and repeats at least ``MIN_OUTER``
    times on a thread: the inner one is its breakdown, dropped here with a verdict that says so.
    Otherwise (a varying number: tokens of requests of different lengths, the steps of partial
    epochs; or few outer instances) both are left to the usual order, where the inner one, repeated
    more often, wins. Returns the candidates left and the rejections of the sub-steps."""
    if len(ok) < 2:
        return ok, {}
    inst = {c.name: _instances(rg, facts.rows[c.name], facts) for c in ok if c.name in facts.rows}
    rel: dict[tuple[str, str], tuple[int, bool]] = {}
    for p in inst:
        for c in inst:
            if p != c:
                r = _nest(inst[p], inst[c])
                if r is not None:
                    rel[(p, c)] = r
    why: dict[str, Rejection] = {}
    for (p, c), (k, regular) in sorted(rel.items()):
        if (c, p) in rel or k <= 1:  # the same extents, or one inner per outer: left to the usual order
            continue
        if regular and inst[p].per_thread_max >= MIN_OUTER:
            why.setdefault(c, Rejection(Reason.SUBSTEP, other=p, per_other=k))  # the loop repeats p: c its breakdown
        # else the inner range, repeated more often, wins in the usual order ("fewer instances than ...")
    left = [c for c in ok if c.name not in why]
    if not left:
        return ok, {}
    return left, why
