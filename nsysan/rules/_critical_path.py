"""What shortening some GPU operations would save the window: the device's work replayed with the new
durations, each operation starting no earlier than it could (the one model of "on the critical path"
that serial-copy-compute and fp32-compute share).

A saving only counts where the GPU was the bottleneck. When the host launches one kernel at a time
and the GPU keeps up (an eager loop), a faster kernel only lengthens the idle after it; a copy taken
off the GPU's queue lets the next kernels start only as early as they were launched. The replay
measures this on the trace's own launch times instead of assuming the whole shortening is gained.

**The replay**, per device, over the operations that start in the window (in start order):

1. *Blocks*: the union of the operations' [start, end) intervals; in each block every stream (of a
   process) keeps its own gaps and loses what its operations save, and the block's new length is
   its longest stream's (a copy that ran beside kernels that go on removes nothing; concurrent
   kernels shortened together count once).
2. *Ready time* of an operation: when its launching call returned (``api_end_ns``; a synchronous
   copy's call, which returns only once the copy is done, when it began), never later than it
   started (a kernel can start before the call returns); its start where the call is not in the
   trace. A block is ready when its first operation that remains is.
3. *The host moves with the GPU it waited for*: an operation launched after its thread waited for
   the GPU (a blocking synchronize or a blocking copy call, ``syncs.sync_calls``, and host-to-device
   copy calls that returned only after their copy ended) is ready earlier by the time the replay
   saved up to the block that wait ended with.
4. Each block starts at the later of its ready time and the previous block's new end; the window's
   saving is the last block's original end less its new end.

Caveats: the device is replayed as one queue of blocks (streams that ran side by side stay inside
one block; a block is never reordered before an earlier one, so a dependency across streams is
kept, perhaps more than the program needs); waits the trace does not show (polling, a host thread
waiting on another) move nothing, so the saving is then lower, never higher.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsysan.analyses.frames import name_in
from nsysan.analyses.syncs import SYNC_COPY_APIS, sync_calls
from nsysan.rules._base import RuleContext

_NONE = 1 << 60  # no ready time (far beyond any timestamp)
# a wait returns when the GPU work ends, by the host's clock: a synchronous copy's call was seen to end
# 3.4 us before its copy did (ladder_reuse, nsys 2025.3), so an op ending this much after is still it
SKEW_NS = 20_000


# a device with more operations in the window is replayed over the leading part holding this many (a
# loop's iterations are alike; the replay steps once per block a wait ended in, in Python), its saving
# scaled to the window's length: bounded work on a trace of millions of operations
REPLAY_MAX_OPS = 200_000
REPLAY_COLUMNS = ("start_ns", "end_ns", "api_start_ns", "api_end_ns", "api_name", "op", "kind", "device_id",
                  "stream_id", "pid", "tid", "correlation_id")


def window_ops(ctx: RuleContext) -> np.ndarray:
    """Positions in ``ctx.a.ops`` of the GPU operations that start in the window, on each device at
    most the leading ``REPLAY_MAX_OPS`` (``saving`` scales what they save to the window)."""
    ops, w = ctx.a.ops, ctx.window
    s = ops["start_ns"].to_numpy()
    rows = np.flatnonzero((s >= w.start_ns) & (s < w.end_ns))
    if len(rows) <= REPLAY_MAX_OPS:
        return rows
    dev = ops["device_id"].to_numpy()[rows]
    order = np.lexsort((s[rows], dev))
    first = np.searchsorted(dev[order], dev[order], side="left")
    keep = order[np.arange(len(order)) - first < REPLAY_MAX_OPS]
    return np.sort(rows[keep])


def _blocking(o: pd.DataFrame) -> np.ndarray:
    """Which of these ops (rows of ``ctx.a.ops``) were copies whose call returned only once they were
    done: a synchronous copy call, or one that ended after its copy did."""
    if len(o) == 0 or "api_name" not in o:
        return np.zeros(len(o), dtype=bool)
    return np.asarray(name_in(o["op"], ("memcpy",)) & (o["api_start_ns"].to_numpy() >= 0)
                      & (name_in(o["api_name"], SYNC_COPY_APIS)
                         | (o["api_end_ns"].to_numpy() >= o["end_ns"].to_numpy())), dtype=bool)


def _waits(ctx: RuleContext, o: pd.DataFrame, blocking: np.ndarray,
           hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Calls after which the host had waited for the GPU, in the window up to ``hi`` (the replayed
    operations' last end): pid, tid, start_ns, end_ns."""
    t, w = ctx.trace, ctx.window
    api = t.cuda_api
    if len(api):
        api = api.loc[(api["end_ns"].to_numpy() >= w.start_ns) & (api["start_ns"].to_numpy() < min(w.end_ns, hi + 1))]
    sc = sync_calls(api, t.memcpy, o)
    b = o.loc[blocking]
    cat = np.concatenate
    return (cat([sc["pid"].to_numpy(np.int64), b["pid"].to_numpy(np.int64)]),
            cat([sc["tid"].to_numpy(np.int64), np.asarray(b["tid"].to_numpy(), dtype=np.int64)]),
            cat([sc["start_ns"].to_numpy(np.int64), b["api_start_ns"].to_numpy(np.int64)]),
            cat([sc["end_ns"].to_numpy(np.int64), b["api_end_ns"].to_numpy(np.int64)]))


def saving(ctx: RuleContext, rows: np.ndarray, new_dur: np.ndarray) -> dict[int, int]:
    """Per device, what the window would save (ns) if the operations at ``rows`` of ``ctx.a.ops``
    (``window_ops``) took ``new_dur`` (aligned with ``rows``; 0 takes one off the queue, its own
    duration leaves it as it is), by the replay of the module docstring."""
    ops = ctx.a.ops
    if len(rows) == 0:
        return {}
    o = ops[[c for c in REPLAY_COLUMNS if c in ops.columns]].iloc[rows]  # the columns read, not every one
    blocking = _blocking(o)
    w = ctx.window
    waits = _waits(ctx, o, blocking, int(o["end_ns"].max()))
    dev = o["device_id"].to_numpy()
    out = {}
    for d in np.unique(dev):
        sel = np.flatnonzero(dev == d)
        got = _replay(o.iloc[sel], np.asarray(new_dur, dtype=np.int64)[sel], blocking[sel], waits)
        # a device whose window held more than REPLAY_MAX_OPS operations was replayed over the
        # leading part that held them (window_ops): its saving scaled to the whole window
        whole = int(((ops["device_id"].to_numpy() == d) & (ops["start_ns"].to_numpy() >= w.start_ns)
                     & (ops["start_ns"].to_numpy() < w.end_ns)).sum()) if len(sel) >= REPLAY_MAX_OPS else len(sel)
        part = int(o["end_ns"].to_numpy()[sel].max()) - int(w.start_ns)
        scale = (int(w.end_ns) - int(w.start_ns)) / part if whole > len(sel) and part > 0 else 1.0
        out[int(d)] = int(got * scale)
    return out


def _blocks(s: np.ndarray, e: np.ndarray, nd: np.ndarray, stream: np.ndarray) -> tuple[np.ndarray, ...]:
    """The blocks of ops (sorted by start): each op's block, the blocks' original starts and ends, and
    their new lengths: each stream of a block keeps its own gaps and loses what its ops save, and
    the block lasts as long as its longest stream then does (a copy beside a kernel that runs on
    saves nothing; two streams that each halve, half)."""
    run_end = np.maximum.accumulate(e)
    first = np.ones(len(s), dtype=bool)
    first[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(first)
    bid = np.cumsum(first) - 1
    bs, be = s[idx], np.maximum.reduceat(e, idx)
    # one key per (block, stream), in (block, stream) order: 1-D uniques (a 2-D unique sorted rows, 5x slower)
    _, sidx = np.unique(stream, return_inverse=True)
    _, key = np.unique(bid * (int(sidx.max()) + 1) + sidx.reshape(-1), return_inverse=True)
    key = key.reshape(-1)
    last = np.zeros(key.max() + 1, dtype=np.int64)
    saved = np.zeros(key.max() + 1, dtype=np.int64)
    kb = np.zeros(key.max() + 1, dtype=np.int64)
    np.maximum.at(last, key, e)
    np.add.at(saved, key, (e - s) - nd)
    kb[key] = bid
    length = np.zeros(len(bs), dtype=np.int64)
    np.maximum.at(length, kb, np.maximum(0, last - bs[kb] - saved))
    return bid, bs, be, np.minimum(length, be - bs)


def _replay(o: pd.DataFrame, nd: np.ndarray, blocking: np.ndarray, waits: tuple[np.ndarray, ...]) -> int:
    """One device's saving: the last block's original end less its replayed end."""
    order = np.argsort(o["start_ns"].to_numpy(), kind="stable")
    s = o["start_ns"].to_numpy(np.int64)[order]
    e = o["end_ns"].to_numpy(np.int64)[order]
    nd = np.clip(nd[order], 0, e - s)
    api_s = o["api_start_ns"].to_numpy(np.int64)[order] if "api_start_ns" in o else np.full(len(s), -1)
    api_e = o["api_end_ns"].to_numpy(np.int64)[order] if "api_end_ns" in o else np.full(len(s), -1)
    # a call enqueues its op by the time it returns; a blocking copy's call, when it begins
    ready = np.where(api_e >= 0, np.minimum(s, np.where(blocking[order], api_s, api_e)), s)
    stream = o["stream_id"].to_numpy(np.int64)[order] * 4_194_304 + o["pid"].to_numpy(np.int64)[order] % 4_194_304
    bid, bs, be, length = _blocks(s, e, nd, stream)
    # the waits this device ended: the op end each waited for (t_w, in block b_w); per op, its thread's last
    wait_of, tw, bw = _waited(o, order, api_s, e, bs, waits)
    return max(0, int(be[-1] - _ends(bid, bs, be, length, ready, nd > 0, wait_of, tw, bw)[-1]))


def _ends(bid: np.ndarray, bs: np.ndarray, be: np.ndarray, length: np.ndarray, ready: np.ndarray,
          kept: np.ndarray, wait_of: np.ndarray, tw: np.ndarray, bw: np.ndarray) -> np.ndarray:
    """Each block's replayed end, block by block: it starts when the previous one ends or when its
    earliest op still on the queue is ready, less what the wait that op's thread last came out of
    gained (``wgain``: the replay moved the op end that wait waited for earlier, and the host with
    it), and lasts its new length. The per-op work is grouped first (the earliest ready op per
    block and wait), so the loop does a few scalar steps per block."""
    nw = len(tw)
    k = np.flatnonzero(kept)
    w_of = np.where(wait_of[k] < 0, nw, wait_of[k])  # slot nw: no wait, no gain
    b_of = bid[k]
    order = np.lexsort((w_of, b_of))
    b_s, w_s, r_s = b_of[order], w_of[order], ready[k][order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (b_s[1:] != b_s[:-1]) | (w_s[1:] != w_s[:-1])
    at = np.flatnonzero(first)
    gmin = np.minimum.reduceat(r_s, at).tolist() if len(at) else []
    gb, gw = b_s[at].tolist(), w_s[at].tolist()
    by_block = np.argsort(bw, kind="stable")
    wb, wi = bw[by_block].tolist(), by_block.tolist()
    twl, bsl, bel, lengths = tw.tolist(), bs.tolist(), be.tolist(), length.tolist()
    wgain = [0] * (nw + 1)
    out = np.empty(len(bsl), dtype=np.int64)
    end, p, q, ng, nq = bsl[0], 0, 0, len(gb), len(wb)
    for b in range(len(bsl)):
        r = _NONE
        while p < ng and gb[p] == b:
            r = min(r, gmin[p] - wgain[gw[p]])
            p += 1
        end = max(end, r if r != _NONE else -_NONE) + lengths[b]
        out[b] = end
        while q < nq and wb[q] <= b:  # the waits that ended with an op of this block: what the replay gained
            w = wi[q]
            if wb[q] == b:
                span = max(bel[b] - bsl[b], 1)  # a point inside a block moves with it, in proportion
                wgain[w] = max(0, twl[w] - (end - lengths[b] + (twl[w] - bsl[b]) * lengths[b] // span))
            q += 1
    return out


def _waited(o: pd.DataFrame, order: np.ndarray, api_s: np.ndarray, e: np.ndarray, bs: np.ndarray,
            waits: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The waits that ended with an op of this device (the latest op end at or before the wait's end,
    reached while it waited): per op (in ``order``) the index of its thread's last such wait before
    its launch (-1 for none), and per wait the op end it waited for and that op's block."""
    wp, wt, ws, we = waits
    out = np.full(len(order), -1, dtype=np.int64)
    ends = np.sort(e)
    j = np.searchsorted(ends, we + SKEW_NS, side="right") - 1
    ok = j >= 0
    ok[ok] = ends[j[ok]] >= ws[ok]
    wp, wt, we = wp[ok], wt[ok], we[ok]
    tw = ends[j[ok]]
    bw = np.searchsorted(bs, tw, side="right") - 1  # the block an end falls in
    if len(wp) == 0 or "tid" not in o:
        return out, tw, bw
    pid = o["pid"].to_numpy(np.int64)[order]
    tid = np.asarray(o["tid"].to_numpy(), dtype=np.int64)[order]
    for p, t in {(int(a), int(b)) for a, b in zip(wp, wt)}:
        k = np.flatnonzero((wp == p) & (wt == t))
        k = k[np.argsort(we[k], kind="stable")]
        mine = np.flatnonzero((pid == p) & (tid == t) & (api_s >= 0))
        i = np.searchsorted(we[k], api_s[mine], side="right") - 1
        out[mine[i >= 0]] = k[i[i >= 0]]
    return out, tw, bw
