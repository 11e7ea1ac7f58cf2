"""A training loop whose device memory grows every step (a kept reference), or churns (malloc/free each step).

``--mode growth``: every ``train_step`` (NVTX range) runs an MLP forward/backward/SGD step and then
keeps a reference: it appends a fresh ``--keep-mib`` MiB tensor (filled on the GPU) to a Python list
that is never cleared, as a loop that stores tensors "for later" (or a loss with its graph) would.
PyTorch's caching allocator has no free block that large, so every step ends with one new
``cudaMalloc`` of that size that is never freed: live device memory grows by ``--keep-mib`` MiB a
step until the process ends (the fix: drop the reference, keep ``.item()`` / ``.cpu()`` values).

``--mode churn``: the same loop, but the big buffer is a temporary: allocated, used, dropped, and
then ``torch.cuda.empty_cache()`` hands it back to the driver, so every step makes one ``cudaMalloc``
and one ``cudaFree`` of the same size (churn, not growth: live memory at the end of each step is
flat).

The first ``--warmup`` steps run in a ``warmup`` range. Recorded with the memory usage events:

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --cuda-memory-usage=true --export sqlite \\
        -o mem_growth python3 workloads/memory/mem_loop.py --mode growth

A profiler should conclude, from ``CUDA_GPU_MEMORY_USAGE_EVENTS``: growth: about ``--keep-mib`` MiB
more device memory live after every step, none of it freed (leak-like growth; iterations until the
device is full = free memory / growth per step); churn: one allocation and one free of that size per
step, flat live memory (allocation churn, fixed by reusing the buffer, not a leak).

Prints (``[mem_loop]`` lines) the wall time per step (mean, p50, each step) and
``torch.cuda.memory_reserved()`` after the first and last step.

``--mode ahead`` (issue 49 item 3, a leak while the CPU runs ahead): the growth loop without a
synchronization per step (the loss is summed on the GPU and read once after the loop) and with
``--heavy`` extra GPU matmuls per step, so the GPU takes several times longer per step than the CPU
takes to queue it and the CPU runs many steps ahead; each step still keeps one ``--keep-mib`` tensor
(one ``cudaMalloc``, never freed). Live memory read at the GPU's completions lags the allocations;
read at the CPU's iteration boundaries it grows ``--keep-mib`` MiB every iteration.

``--mode cupy``: the same shape in CuPy (no PyTorch): each step runs ``--heavy`` matmuls on the GPU
with no synchronization, and a cache (a dict keyed by step, never evicted) keeps a ``--keep-mib``
MiB slice of each step's result: CuPy's memory pool serves the temporaries from its free blocks and
asks the driver (``cudaMalloc``) for the kept slice, so device memory grows every step.

``--until-oom`` (ahead, cupy; run without the profiler): after the recorded loop, keep stepping until
the allocation fails, and print how many more steps fit: the measured out-of-memory horizon to set
against the one a profiler predicts from the trace.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import loops


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("growth", "churn", "ahead", "cupy"), default="growth")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--keep-mib", type=int, default=128)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--heavy", type=int, default=8, help="ahead, cupy: extra GPU matmuls per step")
    p.add_argument("--until-oom", action="store_true", help="ahead, cupy: then step until out of memory")
    args = p.parse_args(argv)
    if args.mode == "ahead":
        return _ahead(args)
    if args.mode == "cupy":
        return _cupy(args)

    import common as cu
    import torch
    import torch.nn.functional as F

    dev, model, opt = loops.small_mlp(args.width)
    d = args.width
    x = torch.randn(args.batch, d, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)
    n_keep = args.keep_mib * 2**20 // 4
    kept: list = []

    def step(i: int) -> float:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with cu.nvtx_range("keep" if args.mode == "growth" else "scratch"):
            buf = torch.empty(n_keep, device=dev).fill_(float(i))
            if args.mode == "growth":
                kept.append(buf)  # the bug: a reference kept every step
            else:
                buf.mul_(2.0)
                del buf
                torch.cuda.empty_cache()  # hands the block back: cudaFree every step
        return loss.item()

    with cu.nvtx_range("warmup"):
        for i in range(args.warmup):
            step(i)
    torch.cuda.synchronize()
    dts, reserved = [], []
    for i in range(args.steps):
        t0 = time.perf_counter()
        with cu.nvtx_range("train_step"):
            step(args.warmup + i)
        dts.append(time.perf_counter() - t0)
        reserved.append(torch.cuda.memory_reserved(dev))
    torch.cuda.synchronize()
    ms = [t * 1e3 for t in dts]
    print(f"[mem_loop] mode {args.mode}: {args.steps} steps (after {args.warmup} warm-up), {args.keep_mib} MiB "
          f"{'kept' if args.mode == 'growth' else 'allocated and freed'} per step; per step mean "
          f"{statistics.mean(ms):.3f} ms, p50 {statistics.median(ms):.3f} ms; memory_reserved after step 1 "
          f"{reserved[0] / 2**20:.0f} MiB, after step {args.steps} {reserved[-1] / 2**20:.0f} MiB; kept tensors "
          f"{len(kept)}", file=sys.stderr, flush=True)
    print("[mem_loop] step ms: " + " ".join(f"{v:.2f}" for v in ms), file=sys.stderr, flush=True)
    return 0


def _report(tag: str, args: argparse.Namespace, queued_s: float, total_s: float, first: int, last: int, kept: int,
            extra: str = "") -> None:
    print(f"[mem_loop] mode {tag}: {args.steps} steps (after {args.warmup} warm-up), {args.keep_mib} MiB kept per "
          f"step, no synchronization in the loop; the CPU queued the steps in {queued_s * 1e3:.1f} ms, the GPU "
          f"finished them {total_s * 1e3:.1f} ms after the loop began (per step {total_s * 1e3 / args.steps:.2f} ms "
          f"on the GPU, {queued_s * 1e3 / args.steps:.2f} ms on the CPU); memory held after step 1 "
          f"{first / 2**20:.0f} MiB, after step {args.steps} {last / 2**20:.0f} MiB; kept {kept}{extra}",
          file=sys.stderr, flush=True)


def _ahead(args: argparse.Namespace) -> int:
    """The growth loop with the CPU far ahead of the GPU (see the module docstring)."""
    import common as cu
    import torch
    import torch.nn.functional as F

    dev, model, opt = loops.small_mlp(args.width)
    d = args.width
    x = torch.randn(args.batch, d, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)
    a0 = torch.randn(8192, 4096, device=dev)
    w = torch.randn(4096, 4096, device=dev) / 64
    n_keep = args.keep_mib * 2**20 // 4
    kept: list = []
    total = torch.zeros((), device=dev)

    def step(i: int) -> None:
        nonlocal total
        a = a0
        for _ in range(args.heavy):  # GPU time: the CPU queues this far faster than the GPU runs it
            a = torch.tanh(a @ w)
        loss = F.cross_entropy(model(x), y) + a[0, 0] * 0
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total = total + loss.detach()  # summed on the GPU: no .item(), no synchronization
        with cu.nvtx_range("keep"):
            kept.append(torch.empty(n_keep, device=dev).fill_(float(i)))  # the bug: a reference kept every step

    with cu.nvtx_range("warmup"):
        for i in range(args.warmup):
            step(i)
    torch.cuda.synchronize()
    held = []
    t0 = time.perf_counter()
    for i in range(args.steps):
        with cu.nvtx_range("train_step"):
            step(args.warmup + i)
        held.append(torch.cuda.memory_reserved(dev))
    queued = time.perf_counter() - t0
    torch.cuda.synchronize()
    took = time.perf_counter() - t0
    print(f"[mem_loop] loss sum {float(total.item()):.3f}", file=sys.stderr, flush=True)
    extra = ""
    if args.until_oom:
        free, card = torch.cuda.mem_get_info(dev)
        before, more = len(kept), 0
        try:
            while True:
                step(args.warmup + args.steps + more)
                more += 1
        except torch.cuda.OutOfMemoryError:
            pass
        extra = (f"; until out of memory: {more} more steps after the loop (free {free / 2**20:.0f} of "
                 f"{card / 2**20:.0f} MiB after it, {before} tensors kept then)")
    _report("ahead", args, queued, took, held[0], held[-1], len(kept), extra)
    return 0


def _cupy(args: argparse.Namespace) -> int:
    """A growing cache in CuPy with the CPU far ahead of the GPU (see the module docstring)."""
    import common as cu
    import cupy as cp

    cp.cuda.Device(0).use()
    pool = cp.get_default_memory_pool()
    rs = cp.random.RandomState(0)
    a0 = rs.standard_normal((8192, 4096), dtype=cp.float32)
    w = rs.standard_normal((4096, 4096), dtype=cp.float32) / 64
    rows = args.keep_mib * 2**20 // (4 * 4096)
    cache: dict[int, object] = {}

    def step(i: int) -> None:
        a = a0
        for _ in range(args.heavy):
            a = cp.tanh(a @ w)
        with cu.nvtx_range("keep"):
            cache[i] = a[:rows].copy()  # the bug: a cache keyed by step, never evicted

    with cu.nvtx_range("warmup"):
        for i in range(args.warmup):
            step(i)
    cp.cuda.Device(0).synchronize()
    held = []
    t0 = time.perf_counter()
    for i in range(args.steps):
        with cu.nvtx_range("train_step"):
            step(args.warmup + i)
        held.append(pool.total_bytes())
    queued = time.perf_counter() - t0
    cp.cuda.Device(0).synchronize()
    took = time.perf_counter() - t0
    extra = ""
    if args.until_oom:
        free, card = cp.cuda.runtime.memGetInfo()
        before, more = len(cache), 0
        try:
            while True:
                step(args.warmup + args.steps + more)
                more += 1
        except cp.cuda.memory.OutOfMemoryError:
            pass
        extra = (f"; until out of memory: {more} more steps after the loop (free {free / 2**20:.0f} of "
                 f"{card / 2**20:.0f} MiB after it, {before} arrays cached then)")
    _report("cupy", args, queued, took, held[0], held[-1], len(cache), extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
