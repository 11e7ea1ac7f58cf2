"""Communication: collectives per type, how much of their time compute hides, and per iteration.

Communication ops are the ``communication`` role of ``opclass`` (NCCL kernels and the like). For each
one, ``exposed_ns`` is the part of its duration during which no compute kernel ran on its device (the
union over every process on the device): exposed communication is what overlapping it with compute
would save; hidden communication costs nothing on the critical path of that device.

Tables:

* ``collectives(ops, window)``: per (device, collective): count, total_ns, exposed_ns, mean_ns,
  max_ns, in ``window``;
* ``comm_per_iteration(ops, iterations)``: per steady iteration: its communication time, the
  exposed part, and its compute time (ops launched inside it: see ``iterations``);
* ``nccl_calls(nvtx_ranges)``: NCCL's own NVTX ranges (``NCCL:ncclAllReduce`` ...) per name: count
  and CPU time of the enqueue calls. NCCL describes them with NVTX payloads (communicator, message
  size, reduction); nsys 2025.3 exports the payload schemas but not the values, so message sizes and
  bus bandwidth are not available from an export, and nsysan says so.
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


def collectives(comm: pd.DataFrame, window: Window) -> pd.DataFrame:
    """Per (device, collective) in ``window`` (ops starting inside it)."""
    if len(comm) == 0:
        return pd.DataFrame(columns=COLUMNS)
    c = comm.loc[(comm["start_ns"] >= window.start_ns) & (comm["start_ns"] < window.end_ns)]
    if len(c) == 0:
        return pd.DataFrame(columns=COLUMNS)
    g = c.groupby(["device_id", "collective"], sort=True).agg(
        count=("dur_ns", "size"), total_ns=("dur_ns", "sum"), exposed_ns=("exposed_ns", "sum"),
        mean_ns=("dur_ns", "mean"), max_ns=("dur_ns", "max")).reset_index()
    g = g.assign(hidden_ns=g["total_ns"] - g["exposed_ns"], mean_ns=g["mean_ns"].round().astype("int64"))
    return g[COLUMNS].sort_values(["total_ns", "device_id", "collective"], ascending=[False, True, True],
                                  kind="stable").reset_index(drop=True)


def comm_per_iteration(comm: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Per iteration (rows of ``Iterations.table``): comm_ns and comm_exposed_ns of the communication
    ops that ran between its start and its completion on its process (no rows without communication)."""
    cols = ["index", "pid", "tid", "start_ns", "end_ns", "comm_ns", "comm_exposed_ns", "warmup"]
    if len(table) == 0 or len(comm) == 0:  # no communication: no rows of zeros
        return pd.DataFrame(columns=cols)
    comm_ns = np.zeros(len(table), dtype=np.int64)
    exp_ns = np.zeros(len(table), dtype=np.int64)
    if len(comm):
        cpid = comm["pid"].to_numpy()
        order = np.argsort(comm["start_ns"].to_numpy(), kind="stable")
        cs = comm["start_ns"].to_numpy()[order]
        cd = comm["dur_ns"].to_numpy()[order]
        ce = comm["exposed_ns"].to_numpy()[order]
        cp = cpid[order]
        tpid = table["pid"].to_numpy()
        for pid in np.unique(tpid):
            m = cp == pid
            s, d, e = cs[m], np.concatenate([[0], np.cumsum(cd[m])]), np.concatenate([[0], np.cumsum(ce[m])])
            rows = np.flatnonzero(tpid == pid)
            lo = np.searchsorted(s, table["start_ns"].to_numpy()[rows], side="left")
            hi = np.searchsorted(s, table["end_ns"].to_numpy()[rows], side="left")
            comm_ns[rows] = d[hi] - d[lo]
            exp_ns[rows] = e[hi] - e[lo]
    return pd.DataFrame({"index": table["index"].to_numpy(), "pid": table["pid"].to_numpy(),
                         "tid": table["tid"].to_numpy(), "start_ns": table["start_ns"].to_numpy(),
                         "end_ns": table["end_ns"].to_numpy(), "comm_ns": comm_ns, "comm_exposed_ns": exp_ns,
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
