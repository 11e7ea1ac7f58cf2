"""Shared scaffolding of the workloads: arguments, the NCCL set-up, the warm-up and timed loop, timing lines and
thread names.

Every program used to carry its own copy of these (the same DDP set-up, argparse, warm-up loop and timing
print); they keep their NVTX ranges exactly: ``warmup`` around the warm-up steps, ``barrier`` around the
ranks' barrier, one range a timed step (``train_step`` unless named). torch is imported inside the helpers,
so ``--help`` works without it.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

# NVLink multicast off (the machines' rule: it can take the host's GPUs out of service)
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def no_multicast() -> None:
    os.environ.update(NO_MULTICAST)


def parser(doc: str | None, steps: int, warmup: int, quick: bool = False) -> argparse.ArgumentParser:
    """The program's parser with ``--steps`` and ``--warmup`` (and ``--quick``: 3 steps after 1)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--warmup", type=int, default=warmup)
    if quick:
        p.add_argument("--quick", action="store_true", help="3 steps after 1 warm-up step")
    return p


def parse(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    args = p.parse_args(argv)
    if getattr(args, "quick", False):
        args.steps, args.warmup = 3, 1
    return args


def name_thread(name: str) -> None:
    """Set the OS thread name (what profilers show); Python's thread name is not the OS one."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except OSError:  # pragma: no cover
        pass


def spin(ms: float) -> None:
    """Host work that holds the thread (a slow input pipeline in Python)."""
    end = time.perf_counter() + ms / 1e3
    x = 0
    while time.perf_counter() < end:
        x += 1


def init_nccl(seed: int | None = 0) -> tuple[int, int, Any, int]:
    """One process a GPU under torchrun: (rank, local rank, device, world size); TF32 matmuls, seeded
    (``seed=None``: by rank)."""
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    world = dist.get_world_size()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(rank if seed is None else seed)
    return rank, local, dev, world


def barrier() -> None:
    """After the warm-up: the GPU drained, then the ranks lined up in a ``barrier`` range."""
    import torch
    import torch.distributed as dist
    from common import nvtx_range

    torch.cuda.synchronize()
    with nvtx_range("barrier"):
        dist.barrier()
        torch.cuda.synchronize()


def warm_then_time(step: Callable[[int, bool], Any], steps: int, warmup: int, between: Callable[[], Any] | None = None,
                   name: str = "train_step") -> tuple[list[float], list[Any]]:
    """``step(i, timed)`` ``warmup`` times in a ``warmup`` range, ``between()``, then ``steps`` times each in
    its own ``name`` range: the timed steps' wall times (ms) and what they returned."""
    from common import nvtx_range

    with nvtx_range("warmup"):
        for i in range(warmup):
            step(i, False)
    if between is not None:
        between()
    ms, out = [], []
    for i in range(steps):
        t0 = time.perf_counter()
        with nvtx_range(name):
            out.append(step(i, True))
        ms.append((time.perf_counter() - t0) * 1e3)
    return ms, out


def mean_p50(ms: list[float], what: str = "per step") -> str:
    return f"{what} mean {statistics.mean(ms):.3f} ms, p50 {statistics.median(ms):.3f} ms"


def small_mlp(width: int) -> tuple[Any, Any, Any]:
    """The small training set-up of the memory and host workloads: TF32 matmuls on cuda:0, seed 0, a
    three-layer MLP of ``width`` (GELU, 10 classes) and SGD at 1e-3. Returns (device, model, optimizer)."""
    import torch
    from torch import nn

    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.manual_seed(0)
    d = width
    model = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d), nn.GELU(), nn.Linear(d, 10)).to(dev)
    return dev, model, torch.optim.SGD(model.parameters(), lr=1e-3)
