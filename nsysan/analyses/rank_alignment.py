"""Ranks aligned on their collectives: the k-th collective of a type on each rank, with the waiting
split from the transfer.

**Alignment.** Collectives are matched by order over the whole capture, then clipped to the
ranks' common steady window (by the time the last rank arrived): the k-th collective of a type on
each rank is the same collective (NCCL requires every rank of a communicator to issue them in the
same order), whatever each rank's own steady window holds. Single-rank reductions (``Reduce (1
rank)``) have no peers and are left out. Where ranks issued different numbers of a type over the
capture, that type is not aligned, and the table and the verdict say why.

**Waiting vs transfer.** A collective's kernel starts on each rank when that rank arrives and ends
on all of them about when the data has moved. For the k-th collective: ``last_start`` = the latest
start over the ranks; a rank's ``wait_ns`` = last_start - its start (it spins in the kernel until
the last rank arrives), its ``transfer_ns`` = its end - last_start.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def align(comm: pd.DataFrame, rank_of: dict[int, int], window: tuple[int, int] | None = None
          ) -> tuple[pd.DataFrame, list[str], list[str]]:
    """The k-th collective of each type on every rank, over all of ``comm`` (the whole capture):
    start, end, last_start, wait_ns, transfer_ns, and whether this rank arrived last; then the rows
    whose last arrival is in ``window``. ``comm`` needs pid, start_ns, end_ns, collective. When the
    ranks issued different numbers of a type over the capture, they are aligned on those that run at
    the same time on every rank (``_matching_offsets``), else that type is not aligned. Returns
    (aligned, the types not aligned with why, the types aligned on part of their sequence with why)."""
    cols = ["collective", "k", "rank", "pid", "start_ns", "end_ns", "last_start_ns", "wait_ns", "transfer_ns",
            "last", "lead_ns"]
    if len(comm) == 0 or len(rank_of) < 2:
        return pd.DataFrame(columns=cols), [], []
    c = comm.loc[(comm["collective"] != "Reduce (1 rank)") & comm["pid"].isin(list(rank_of))]
    parts, skipped, trimmed = [], [], []
    for coll, g in c.groupby("collective", sort=True):
        per = {int(p): x.sort_values("start_ns", kind="stable") for p, x in g.groupby("pid", sort=True)}
        counts = {p: len(x) for p, x in per.items()}
        if len(per) < 2:
            continue
        pids = sorted(per)
        if len(set(counts.values())) != 1:
            offsets = _matching_offsets({p: per[p] for p in pids})
            if offsets is None:
                skipped.append(f"{coll}: ranks issued different numbers over the capture "
                               f"({', '.join(f'rank {rank_of[p]}: {k}' for p, k in sorted(counts.items()))}) and no "
                               "shift of one sequence against the other makes the k-th of every rank run at the same "
                               "time, so the k-th of one rank is not known to be the k-th of another")
                continue
            n = min(counts.values())
            trimmed.append(f"{coll}: ranks issued different numbers over the capture "
                           f"({', '.join(f'rank {rank_of[p]}: {k}' for p, k in sorted(counts.items()))}): aligned on "
                           f"the {n} that run at the same time on every rank (the rest lie outside another rank's "
                           "capture)")
            per = {p: per[p].iloc[offsets[p]:offsets[p] + n] for p in pids}
        n = min(len(x) for x in per.values())
        st = np.stack([per[p]["start_ns"].to_numpy(dtype=np.int64) for p in pids])  # ranks x k
        en = np.stack([per[p]["end_ns"].to_numpy(dtype=np.int64) for p in pids])
        last = st.max(axis=0)
        order = np.sort(st, axis=0)
        lead = order[-1] - order[-2]
        late = st.argmax(axis=0)
        for i, p in enumerate(pids):
            parts.append(pd.DataFrame({
                "collective": coll, "k": np.arange(n), "rank": rank_of[p], "pid": p, "start_ns": st[i],
                "end_ns": en[i], "last_start_ns": last, "wait_ns": np.clip(last - st[i], 0, en[i] - st[i]),
                "transfer_ns": np.clip(en[i] - last, 0, None), "last": late == i, "lead_ns": lead}))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)
    if window is not None and len(out):
        out = out.loc[(out["last_start_ns"] >= window[0]) & (out["last_start_ns"] < window[1])]
    return out[cols].reset_index(drop=True), skipped, trimmed


MAX_SHIFT = 64  # collectives one rank may have beyond another's (a capture that starts or stops between them)
MIN_MATCHED = 0.99  # share of the k-th collectives that must run at the same time on both ranks


def _matching_offsets(per: dict[int, pd.DataFrame]) -> dict[int, int] | None:
    """For ranks that issued different numbers of one collective over the capture (one rank's capture
    began or ended between two of them), where each rank's sequence starts so that the k-th of every
    rank is the same collective: a collective's kernels run at the same time on every rank (each
    waits for the others), so the k-th kernels of two ranks must overlap in time. The rank with the
    fewest is the reference; each other rank's shift (at most ``MAX_SHIFT``) is the one under which
    at least ``MIN_MATCHED`` of the pairs overlap, the best such; None when a rank has none."""
    ref = min(per, key=lambda p: (len(per[p]), p))
    n = len(per[ref])
    if n == 0:
        return None
    rs, re_ = per[ref]["start_ns"].to_numpy(dtype=np.int64), per[ref]["end_ns"].to_numpy(dtype=np.int64)
    out = {ref: 0}
    for p, x in per.items():
        if p == ref:
            continue
        ps, pe = x["start_ns"].to_numpy(dtype=np.int64), x["end_ns"].to_numpy(dtype=np.int64)
        best, best_frac = None, 0.0
        for o in range(min(len(x) - n, MAX_SHIFT) + 1):
            frac = float(np.mean((ps[o:o + n] <= re_) & (rs <= pe[o:o + n])))
            if frac > best_frac:
                best, best_frac = o, frac
        if best is None or best_frac < MIN_MATCHED or len(x) - n > MAX_SHIFT:
            return None
        out[p] = best
    return out
