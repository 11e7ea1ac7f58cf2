"""Communication: collectives per type, how much of their time compute hides, and per iteration.

Communication ops are the ``communication`` role of ``opclass`` (NCCL kernels and the like). For each
one, ``exposed_ns`` is the part of its duration during which no compute kernel ran on its device (the
union over every process on the device): exposed communication is what overlapping it with compute
would save; hidden communication costs nothing on the critical path of that device.

Tables:

* ``collectives(ops, window, busy)``: per (device, collective): count, total_ns, exposed_ns, mean_ns,
  max_ns, in ``window``;
* ``comm_per_iteration(ops, iterations, busy)``: per iteration: its communication time and the
  exposed part, per rank (process), over the iteration's period;
* ``nccl_calls(nvtx_ranges)``: NCCL's own NVTX ranges (``NCCL:ncclAllReduce`` ...) per name: count
  and CPU time of the enqueue calls. NCCL describes them with NVTX payloads (communicator, message
  size, reduction); nsys 2025.3 exports the payload schemas but not the values, so message sizes and
  bus bandwidth are not available from an export, and nsysan says so.

**One window rule** (every table of communication, as for busy time): an op counts in a window
for the part of it inside the window. It is counted (``count``) when any of it is inside, its
duration and exposed time are clipped to the window, so a window's totals are the sums of its
rows and consecutive windows add up to the window that joins them.

**Per iteration.** Each iteration owns its period, (previous completion in its process, its
completion]; a process's first iteration owns (its start, its completion]. The previous completion
is the process's, whatever thread it came from (NCCL's ranges come from the main and the autograd
threads; per thread, their periods would overlap): periods tile the timeline, so when the CPU
queues iterations ahead of the GPU nothing is counted twice, and a rank's per-iteration values add
up to its totals over (its first completion, its last completion]. Each rank
(process) is measured on its own communication kernels, per device: ``comm_ns`` is the wall-clock
time some of its communication kernels ran, ``comm_exposed_ns`` the part with no compute on that
device (neither exceeds the period of a rank on one device).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsysan.analyses import intervals as iv
from nsysan.analyses.frames import category_mask, name_in
from nsysan.analyses.gpu import Busy, Window
from nsysan.analyses.opclass import collective_of

COLUMNS = ["device_id", "collective", "count", "total_ns", "exposed_ns", "hidden_ns", "mean_ns", "max_ns"]


def comm_ops(ops: pd.DataFrame, busy: Busy | None = None) -> pd.DataFrame:
    """The communication ops, with their collective and exposed time (no compute on the device)."""
    if len(ops) == 0 or "role" not in ops:
        return pd.DataFrame(columns=["device_id", "pid", "stream_id", "start_ns", "end_ns", "dur_ns", "name",
                                     "collective", "exposed_ns"])
    sel = name_in(ops["role"], ("communication",))
    c = ops.loc[sel, ["device_id", "pid", "stream_id", "start_ns", "end_ns", "name"]].reset_index(drop=True)
    if len(c) == 0:
        return c.assign(dur_ns=pd.Series(dtype="int64"), collective=pd.Series(dtype=object),
                        exposed_ns=pd.Series(dtype="int64"))
    b = busy or Busy(ops)
    exposed = np.zeros(len(c), dtype=np.int64)
    dev = c["device_id"].to_numpy()
    st, en = c["start_ns"].to_numpy(), c["end_ns"].to_numpy()
    for d in np.unique(dev):
        rows = np.flatnonzero(dev == d)
        ms, me = b.per_dev[int(d)]["compute"]
        exposed[rows] = (en[rows] - st[rows]) - iv.covered_between(ms, me, st[rows], en[rows])
    names = c["name"].astype(str)
    coll = names.map({n: collective_of(n) or "other" for n in names.unique()})
    return c.assign(dur_ns=en - st, collective=coll.to_numpy(), exposed_ns=exposed)


def _clipped(comm: pd.DataFrame, lo: int, hi: int, busy: Busy | None) -> tuple[pd.DataFrame, np.ndarray,
                                                                                  np.ndarray]:
    """The ops with any part in [lo, hi) (a 0 ns op: its start inside), their duration and exposed
    time clipped to it. Ops that cross an edge (a few) have their exposed part measured again on the
    clipped span; without ``busy``, as the exposed share of the op."""
    st, en = comm["start_ns"].to_numpy(), comm["end_ns"].to_numpy()
    keep = ((st < hi) & (en > lo)) | ((st == en) & (st >= lo) & (st < hi))
    c = comm.loc[keep]
    s, e = np.clip(st[keep], lo, hi), np.clip(en[keep], lo, hi)
    dur = e - s
    exp = c["exposed_ns"].to_numpy().astype(np.int64, copy=True)
    cut = np.flatnonzero(dur != en[keep] - st[keep])
    if cut.size:
        full = (en[keep] - st[keep])[cut]
        if busy is None:
            exp[cut] = np.where(full > 0, exp[cut] * dur[cut] // np.maximum(full, 1), 0)
        else:
            dev = c["device_id"].to_numpy()[cut]
            for d in np.unique(dev):
                rows = cut[dev == d]
                ms, me = busy.per_dev[int(d)]["compute"] if int(d) in busy.per_dev else (np.empty(0, np.int64),) * 2
                exp[rows] = dur[rows] - iv.covered_between(ms, me, s[rows], e[rows])
    return c, dur, exp


def collectives(comm: pd.DataFrame, window: Window, busy: Busy | None = None) -> pd.DataFrame:
    """Per (device, collective) in ``window``: the ops with any part inside it, their durations and
    exposed time clipped to it (the module's window rule)."""
    if len(comm) == 0:
        return pd.DataFrame(columns=COLUMNS)
    c, dur, exp = _clipped(comm, window.start_ns, window.end_ns, busy)
    if len(c) == 0:
        return pd.DataFrame(columns=COLUMNS)
    c = pd.DataFrame({"device_id": c["device_id"].to_numpy(), "collective": c["collective"].to_numpy(),
                      "dur_ns": dur, "exposed_ns": exp})
    g = c.groupby(["device_id", "collective"], sort=True).agg(
        count=("dur_ns", "size"), total_ns=("dur_ns", "sum"), exposed_ns=("exposed_ns", "sum"),
        max_ns=("dur_ns", "max")).reset_index()
    g = g.assign(hidden_ns=g["total_ns"] - g["exposed_ns"],
                 mean_ns=(g["total_ns"] / g["count"]).round().astype("int64"))
    return g[COLUMNS].sort_values(["total_ns", "device_id", "collective"], ascending=[False, True, True],
                                  kind="stable").reset_index(drop=True)


def comm_per_iteration(comm: pd.DataFrame, table: pd.DataFrame, busy: Busy | None = None) -> pd.DataFrame:
    """Per iteration (rows of ``Iterations.table``): over its process's period (``span_start_ns``,
    ``end_ns``], the wall-clock time its process's communication kernels ran (``comm_ns``) and the part with no
    compute on their device (``comm_exposed_ns``), per device and added over the process's devices
    (no rows without communication). See the module's docstring."""
    cols = ["index", "pid", "tid", "start_ns", "span_start_ns", "end_ns", "comm_ns", "comm_exposed_ns", "warmup"]
    if len(table) == 0 or len(comm) == 0:  # no communication: no rows of zeros
        return pd.DataFrame(columns=cols)
    end = table["end_ns"].to_numpy(dtype=np.int64)
    start = table["start_ns"].to_numpy(dtype=np.int64)
    tpid = table["pid"].to_numpy()
    # each process's iterations in order of completion, whatever thread ran them (NCCL ranges come
    # from the main and the autograd threads): the previous completion of the process opens a period
    order = np.lexsort((np.arange(len(table)), end, tpid))
    prev = np.empty(len(table), dtype=np.int64)
    e_sorted, p_sorted = end[order], tpid[order]
    first = np.ones(len(table), dtype=bool)
    first[1:] = p_sorted[1:] != p_sorted[:-1]
    prev[order] = np.where(first, np.minimum(start[order], e_sorted), np.concatenate([[0], e_sorted[:-1]]))
    lo = prev  # each iteration's period: (lo, end]
    comm_ns = np.zeros(len(table), dtype=np.int64)
    exp_ns = np.zeros(len(table), dtype=np.int64)
    cpid, cdev = comm["pid"].to_numpy(), comm["device_id"].to_numpy()
    cst, cen = comm["start_ns"].to_numpy(), comm["end_ns"].to_numpy()
    for pid in np.unique(tpid):
        rows = np.flatnonzero(tpid == pid)
        mine = cpid == pid
        for d in np.unique(cdev[mine]):
            m = mine & (cdev == d)
            u = iv.merge(cst[m], cen[m])
            if busy is not None and int(d) in busy.per_dev:
                e = iv.subtract(u, busy.per_dev[int(d)]["compute"])
            else:  # no compute known on the device: all of it is exposed
                e = u
            comm_ns[rows] += iv.covered_between(*u, lo[rows], end[rows])
            exp_ns[rows] += iv.covered_between(*e, lo[rows], end[rows])
    return pd.DataFrame({"index": table["index"].to_numpy(), "pid": tpid,
                         "tid": table["tid"].to_numpy(), "start_ns": start, "span_start_ns": lo,
                         "end_ns": end, "comm_ns": comm_ns, "comm_exposed_ns": exp_ns,
                         "warmup": table["warmup"].to_numpy()})


def nccl_calls(rg: pd.DataFrame) -> pd.DataFrame:
    """NCCL's NVTX ranges per name: count, total CPU time, first start (communicator set-up shows as
    ``ncclCommInitRank*``)."""
    cols = ["name", "count", "total_ns", "first_start_ns"]
    if len(rg) == 0:
        return pd.DataFrame(columns=cols)
    m = category_mask(rg["name"], lambda s: s.startswith("NCCL:"))
    if "domain" in rg:
        m |= category_mask(rg["domain"], lambda s: s.upper() == "NCCL")
    r = rg.loc[m]
    if len(r) == 0:
        return pd.DataFrame(columns=cols)
    g = r.groupby("name", sort=True).agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum"),
                                         first_start_ns=("start_ns", "min")).reset_index()
    return g[cols].sort_values(["total_ns", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)
