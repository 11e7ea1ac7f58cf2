"""The CPU writes a managed buffer every step before a kernel reads it (issue 49 item 4).

One ``cudaMallocManaged`` buffer of ``--mib`` MiB (float32, through cuda-python so the trace shows the
runtime call), seen by numpy on the host and by PyTorch on the GPU (zero-copy, through
``__cuda_array_interface__``). Every step (NVTX range ``train_step``; ``--warmup`` steps first in
``warmup``):

1. ``cpu_write``: the host writes every element (``np.multiply(src, step, out=buf)``: a fresh batch).
   The pages live on the GPU since the previous step's kernel read them, so each first touch is a CPU
   page fault that pulls the page back to the host: the GPU sits idle while the CPU writes;
2. ``gpu_read``: a GEMM of the buffer (viewed as a matrix) with a device weight, and a sum: GPU page
   faults move the pages back to the device;
3. ``loss.item()``: the host waits for the result.

``--mode faults`` does just that. The fixes:

* ``--mode prefetch``: ``cudaMemPrefetchAsync`` of the buffer to the host (``cudaMemLocationTypeHost``)
  before the writes and to the device before the kernels: the pages move in bulk, not a fault at a time;
* ``--mode host_copy``: keep the data on one side: the CPU writes a pinned host buffer and one
  ``copy_(non_blocking=True)`` moves it into a device buffer the kernels read (no managed memory).

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --cuda-um-gpu-page-faults=true \\
        --cuda-um-cpu-page-faults=true --export sqlite -o um_cpu_writes python3 workloads/memory/um_cpu_writes.py

``--measure`` runs the three modes in turn (no profiler) and prints each one's step time.

Prints (``[um_cpu_writes]`` lines) the wall time per step (mean, p50), the host write time (mean) and the
GPU time of the read (CUDA events, mean), and a checksum.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py


def run(mode: str, steps: int, warmup: int, mib: int) -> dict[str, float]:
    import common as cu
    import numpy as np
    import torch
    from um_loop import _CAI, prefetch

    cudart, check = cu.cudart, cu.check
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.backends.cuda.matmul.allow_tf32 = False
    n = mib * 2**20 // 4
    cols = 1024
    rows = n // cols
    nbytes = n * 4
    w = torch.randn(cols, 256, device=dev) / 32
    src = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    ptr = 0
    if mode == "host_copy":
        host_t = torch.empty(n, dtype=torch.float32, pin_memory=True)
        buf = host_t.numpy()
        x = torch.empty(n, dtype=torch.float32, device=dev)
    else:
        ptr = int(check(cudart.cudaMallocManaged(nbytes, getattr(cudart, "cudaMemAttachGlobal", 1))))
        buf = np.ctypeslib.as_array((ctypes.c_float * n).from_address(ptr))
        buf[:] = 0.0  # first touch on the host
        x = torch.as_tensor(_CAI(ptr, n), device=dev)
        assert x.data_ptr() == ptr, "torch copied the managed buffer"
    host_ms: list[float] = []
    evs: list = []
    out: list[float] = []

    def step(i: int, timed: bool) -> None:
        if mode == "prefetch":
            prefetch(cudart, check, ptr, nbytes, None)
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with cu.nvtx_range("cpu_write"):
            np.multiply(src, np.float32(1.0 + 1e-3 * i), out=buf)
        if timed:
            host_ms.append((time.perf_counter() - t0) * 1e3)
        with cu.nvtx_range("gpu_read"):
            if mode == "prefetch":
                prefetch(cudart, check, ptr, nbytes, 0)
            elif mode == "host_copy":
                x.copy_(host_t, non_blocking=True)
            e = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
            e[0].record()
            y = torch.relu(x.view(rows, cols) @ w)
            loss = y.sum()
            e[1].record()
            if timed:
                evs.append(e)
        out.append(loss.item())

    with cu.nvtx_range("warmup"):
        for i in range(warmup):
            step(i, False)
    dts = []
    for i in range(steps):
        t0 = time.perf_counter()
        with cu.nvtx_range("train_step"):
            step(warmup + i, True)
        dts.append(time.perf_counter() - t0)
    ms = [v * 1e3 for v in dts]
    kern = [a.elapsed_time(b) for a, b in evs]
    res = {"mean": statistics.mean(ms), "p50": statistics.median(ms), "host": statistics.mean(host_ms),
           "gpu": statistics.mean(kern)}
    print(f"[um_cpu_writes] mode {mode}: {steps} steps (after {warmup} warm-up) over {mib} MiB; per step mean "
          f"{res['mean']:.3f} ms, p50 {res['p50']:.3f} ms; host write mean {res['host']:.3f} ms; GPU read (CUDA "
          f"events) mean {res['gpu']:.3f} ms; checksum {sum(out[-3:]):.1f}", file=sys.stderr, flush=True)
    x = None  # the tensor over the managed buffer dropped before the buffer is freed
    if ptr:
        check(cudart.cudaFree(ptr))
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("faults", "prefetch", "host_copy"), default="faults")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--mib", type=int, default=32, help="managed buffer size (never near the card's memory)")
    p.add_argument("--measure", type=int, default=0, help="run every mode this many times, alternating")
    args = p.parse_args(argv)
    if not args.measure:
        run(args.mode, args.steps, args.warmup, args.mib)
        return 0
    got: dict[str, list[float]] = {}
    for _ in range(args.measure):
        for mode in ("faults", "prefetch", "host_copy"):
            got.setdefault(mode, []).append(run(mode, args.steps, args.warmup, args.mib)["p50"])
    base = statistics.median(got["faults"])
    for mode, v in got.items():
        m = statistics.median(v)
        print(f"[um_cpu_writes] measure {mode}: p50 step {m:.3f} ms over {len(v)} runs ({', '.join(f'{x:.3f}' for x in v)}); "
              f"saves {base - m:.3f} ms a step against faults", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
