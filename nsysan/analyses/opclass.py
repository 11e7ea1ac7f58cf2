"""One classification of GPU work, read by every analysis and rule.

Each GPU op has a **role**:

* ``compute``: kernels and CUDA Graph launches that are not communication;
* ``communication``: collective and point-to-point kernels of NCCL (``ncclDevKernel_*``,
  ``ncclKernel_*``, and the single-rank ``oneRankReduce``), NVSHMEM, and custom all-reduce kernels
  (vLLM's ``cross_device_reduce``, Transformer Engine's userbuffers). While such a kernel runs the
  SMs mostly wait for peers: it is not compute, and rules that judge compute leave it out;
* ``memcpy`` and ``memset``: the copy engines and fills.

``collective_of(name)`` names the collective of a communication kernel (``AllReduce``,
``AllGather``, ``ReduceScatter``, ``Broadcast``, ``Reduce``, ``SendRecv``, ``AllToAll``...).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

ROLES = ("compute", "communication", "memcpy", "memset")

_COMM = re.compile(r"(^|[\s:<])(ncclDevKernel|ncclKernel|nccl_?[A-Z]\w*Kernel|oneRankReduce|nvshmem\w*|"
                   r"cross_device_reduce\w*|userbuffers\w*|ncclDev\w+)")
_COLLECTIVE = re.compile(r"(AllReduce|AllGather|ReduceScatter|AllToAll|Alltoall|Broadcast|SendRecv|Send|Recv|Reduce)")


def is_communication(name: str) -> bool:
    return bool(_COMM.search(name))


def collective_of(name: str) -> str | None:
    """The collective a communication kernel performs, from its name (None when not communication)."""
    if not is_communication(name):
        return None
    if "oneRankReduce" in name:
        return "Reduce (1 rank)"
    if "cross_device_reduce" in name:
        return "AllReduce"
    m = _COLLECTIVE.search(name)
    if not m:
        return "other"
    c = m.group(1)
    return "AllToAll" if c == "Alltoall" else c


def roles(op: pd.Series, name: pd.Series) -> pd.Categorical:
    """The role of each GPU op (``op`` in kernel/graph/memcpy/memset, ``name`` its kernel name),
    decided once per distinct name."""
    n = len(op)
    op_c = pd.Categorical(op)
    name_c = name.array if isinstance(name.array, pd.Categorical) else pd.Categorical(name.astype(str))
    comm_cat = np.array([is_communication(str(c)) for c in name_c.categories], dtype=bool)
    is_comm = np.zeros(n, dtype=bool)
    if len(comm_cat) and comm_cat.any():
        codes = np.asarray(name_c.codes)
        is_comm = np.where(codes >= 0, comm_cat[np.maximum(codes, 0)], False)
    op_codes = np.asarray(op_c.codes)
    op_names = [str(c) for c in op_c.categories]
    role_of_op = np.array([ROLES.index(o) if o in ("memcpy", "memset") else 0 for o in op_names] or [0], dtype=np.int8)
    out = np.where(op_codes >= 0, role_of_op[np.maximum(op_codes, 0)], 0).astype(np.int8)
    out[is_comm & (out == 0)] = 1
    return pd.Categorical.from_codes(out, categories=pd.Index(list(ROLES), dtype=object), validate=False)
