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
        -o mem_growth python3 workloads/mem_loop.py --mode growth

A profiler should conclude, from ``CUDA_GPU_MEMORY_USAGE_EVENTS``: growth: about ``--keep-mib`` MiB
more device memory live after every step, none of it freed (leak-like growth; iterations until the
device is full = free memory / growth per step); churn: one allocation and one free of that size per
step, flat live memory (allocation churn, fixed by reusing the buffer, not a leak).

Prints (``[mem_loop]`` lines) the wall time per step (mean, p50, each step) and
``torch.cuda.memory_reserved()`` after the first and last step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("growth", "churn"), default="growth")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--keep-mib", type=int, default=128)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=2048)
    args = p.parse_args(argv)

    import common as cu
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.manual_seed(0)
    d = args.width
    model = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d), nn.GELU(), nn.Linear(d, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
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


if __name__ == "__main__":
    sys.exit(main())
