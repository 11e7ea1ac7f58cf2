"""What the trace lacks that an analysis needs, with the ``nsys profile`` flag that adds it.

Each entry: ``input`` (what is missing), ``flag`` (the option that records it), ``for`` (what it
would tell). Listed only where the program could use it: memory usage events when the program made
CUDA calls, thread scheduling when it did, unified memory faults when managed memory migrated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from nsysan.trace.model import Trace


def missing_inputs(trace: Trace) -> list[dict[str, str]]:
    tables = set(trace.meta.tables)
    out: list[dict[str, str]] = []
    cuda = len(trace.cuda_api) > 0
    if cuda and "CUDA_GPU_MEMORY_USAGE_EVENTS" not in tables:
        out.append({"input": "GPU memory usage events", "flag": "--cuda-memory-usage=true",
                    "for": "live device memory over time, its peak and growth per iteration"})
    if cuda and "SCHED_EVENTS" not in tables:
        out.append({"input": "thread scheduling (context switches)", "flag": "--cpuctxsw=process-tree",
                    "for": "whether the launching threads were running or blocked in the GPU's idle time"})
    mc = trace.memcpy
    um = bool(len(mc)) and bool(np.isin(mc["copy_kind"].to_numpy(), (11, 12)).any())
    if um and "CUDA_UM_GPU_PAGE_FAULT_EVENTS" not in tables and "CUDA_UM_CPU_PAGE_FAULT_EVENTS" not in tables:
        out.append({"input": "unified memory page faults", "flag": "--cuda-um-gpu-page-faults=true "
                    "--cuda-um-cpu-page-faults=true", "for": "the faults behind the migrations and the kernel time "
                    "they stall"})
    return out
