"""Unified (managed) memory touched by the CPU and the GPU in turn every iteration: thrashing, or prefetched.

One ``cudaMallocManaged`` buffer of ``--mib`` MiB (float32; through cuda-python, so the trace shows
the runtime call) is seen by numpy on the host (a view over the managed pointer) and by PyTorch on
the GPU (a zero-copy tensor over the same pointer, through ``__cuda_array_interface__``). Every
iteration (NVTX range ``train_step``; ``--warmup`` iterations first in ``warmup``):

1. ``cpu_update``: the host updates every element (``np.add(h, 1, out=h)``): the pages live on the GPU after the
   previous kernel, so each first touch is a CPU page fault that migrates the page to the host;
2. ``gpu_update``: elementwise kernels on the GPU read and write every element (``t.mul_().add_()``):
   GPU page faults migrate the pages back to the device, on demand;
3. ``torch.cuda.synchronize()`` before the next host touch.

``--mode thrash`` does just that: the same memory moves both ways every iteration, on faults.
``--mode prefetch`` adds the fix: ``cudaMemPrefetchAsync`` of the whole buffer to the device before
the kernels, and to the host (``cudaMemLocationTypeHost`` / ``cudaCpuDeviceId``) before the host
touch, so the data moves in a few bulk migrations (cause: user prefetch) instead of thousands of
faults. (Keeping the update on the GPU removes the migrations altogether.)

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --cuda-um-gpu-page-faults=true \\
        --cuda-um-cpu-page-faults=true --export sqlite -o um_thrash python3 workloads/memory/um_loop.py --mode thrash

A profiler should conclude: thrash: every iteration, CPU faults and GPU faults over the whole buffer
and ~``--mib`` MiB migrated each way (MEMCPY rows of kinds 11/12, cause page fault), the kernels
stretched by pending faults; prefetch: the same bytes in a few user-prefetch migrations per
iteration, few or no faults, shorter kernels.

Prints (``[um_loop]`` lines) the wall time per iteration (mean, p50), the host update time, and the
GPU-kernel time of the update from CUDA events (mean), and a checksum.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py


class _CAI:
    """A managed buffer exposed through ``__cuda_array_interface__`` (zero-copy for torch.as_tensor)."""

    def __init__(self, ptr: int, n: int) -> None:
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False), "version": 2,
                                         "strides": None}


def prefetch(cudart, check, ptr: int, nbytes: int, device: int | None) -> None:  # type: ignore[no-untyped-def]
    """cudaMemPrefetchAsync to ``device`` (None: the host) on the legacy default stream, CUDA 12 or 13 API."""
    try:
        loc = cudart.cudaMemLocation()
        if device is None:
            loc.type = cudart.cudaMemLocationType.cudaMemLocationTypeHost
            loc.id = 0
        else:
            loc.type = cudart.cudaMemLocationType.cudaMemLocationTypeDevice
            loc.id = device
        check(cudart.cudaMemPrefetchAsync(ptr, nbytes, loc, 0, 0))
    except TypeError:  # CUDA 12 signature: (ptr, count, dstDevice, stream)
        check(cudart.cudaMemPrefetchAsync(ptr, nbytes, -1 if device is None else device, 0))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("thrash", "prefetch"), default="thrash")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--mib", type=int, default=16, help="managed buffer size (keep it small: never near the card's memory)")
    args = p.parse_args(argv)

    import common as cu
    import numpy as np
    import torch

    cudart, check = cu.cudart, cu.check
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.zeros(1, device=dev)  # primary context first
    n = args.mib * 2**20 // 4
    nbytes = n * 4
    ptr = int(check(cudart.cudaMallocManaged(nbytes, getattr(cudart, "cudaMemAttachGlobal", 1))))
    host = np.ctypeslib.as_array((ctypes.c_float * n).from_address(ptr))
    host[:] = 0.0  # first touch on the host
    try:
        t = torch.as_tensor(_CAI(ptr, n), device=dev)
        assert t.data_ptr() == ptr, "torch copied the managed buffer"
        gpu_kind = "torch"
    except Exception as exc:  # fall back to CuPy over the same pointer
        import cupy

        print(f"[um_loop] torch over the managed pointer failed ({exc!r}); using CuPy", file=sys.stderr)
        mem = cupy.cuda.UnownedMemory(ptr, nbytes, None)
        t = cupy.ndarray((n,), dtype=cupy.float32, memptr=cupy.cuda.MemoryPointer(mem, 0))
        gpu_kind = "cupy"
    host_ms: list[float] = []
    evs: list = []

    def step(timed: bool) -> None:
        if args.mode == "prefetch":
            prefetch(cudart, check, ptr, nbytes, None)
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with cu.nvtx_range("cpu_update"):
            np.add(host, 1.0, out=host)
        if timed:
            host_ms.append((time.perf_counter() - t0) * 1e3)
        with cu.nvtx_range("gpu_update"):
            if args.mode == "prefetch":
                prefetch(cudart, check, ptr, nbytes, 0)
            e = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
            e[0].record()
            if gpu_kind == "torch":
                t.mul_(0.5).add_(1.0)
            else:
                import cupy

                cupy.multiply(t, 0.5, out=t)
                cupy.add(t, 1.0, out=t)
            e[1].record()
            if timed:
                evs.append(e)
        torch.cuda.synchronize()

    with cu.nvtx_range("warmup"):
        for _ in range(args.warmup):
            step(False)
    dts = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        with cu.nvtx_range("train_step"):
            step(True)
        dts.append(time.perf_counter() - t0)
    ms = [v * 1e3 for v in dts]
    kern = [a.elapsed_time(b) for a, b in evs]
    chk = float(host[:1000].sum())
    print(f"[um_loop] mode {args.mode}: {args.steps} iterations (after {args.warmup} warm-up) over {args.mib} MiB of "
          f"managed memory; per iteration mean {statistics.mean(ms):.3f} ms, p50 {statistics.median(ms):.3f} ms; "
          f"host update mean {statistics.mean(host_ms):.3f} ms; GPU update (CUDA events) mean "
          f"{statistics.mean(kern):.3f} ms, p50 {statistics.median(kern):.3f} ms; checksum {chk:.1f}",
          file=sys.stderr, flush=True)
    del t
    check(cudart.cudaFree(ptr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
