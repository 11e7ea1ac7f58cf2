"""A conv training loop with a few slow iterations in the middle, each for a known reason.

Every ``train_step`` (NVTX range) runs a small conv net (``cudnn.benchmark = True``) forward,
backward and SGD step on a batch of ``--batch`` 3x``--size``x``--size`` images and reads the loss.
After ``--warmup`` warm-up steps (``warmup`` range; cuDNN autotunes there), ``--steps`` steps, of
which these are slow on purpose (indices counted from 0 over the ``train_step`` ranges):

- every ``--ckpt-every``-th step (14, 29, 44 by default) saves a checkpoint inside the step
  (``torch.save`` of the model and optimizer state to /tmp, NVTX ``checkpoint``): device-to-host
  copies and file writes;
- step ``--shape-step`` (22) gets a batch of a new spatial size (``--size`` + 32): with
  ``cudnn.benchmark`` on, cuDNN autotunes every convolution again for that shape (many trial
  kernels), then the next step is back to the usual shape (already tuned);
- step ``--gc-step`` (37) runs ``gc.collect()`` (NVTX ``gc``) with ~1.5 M live container objects
  kept by the program, so a full collection takes long.

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --export sqlite -o slow_iters \\
        python3 workloads/training/slow_iters.py

A profiler should conclude: the listed steps are far above the median step (not warm-up: they are
in the middle), with their causes: checkpointing every 15 steps (periodic, memcpy DtoH + file I/O),
one autotune burst (new kernel names, many short trial convolutions, after a shape change), one
garbage collection (untraced CPU time); fixes: checkpoint off the loop / less often / async, fixed or
bucketed shapes or ``cudnn.benchmark`` off for dynamic shapes, ``gc.freeze()`` / tuned thresholds.

Prints (``[slow_iters]`` lines) the per-step wall time of every step (ms), the median and the steps
above 2x the median with their reason.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=45)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--ckpt-every", type=int, default=15)
    p.add_argument("--shape-step", type=int, default=22)
    p.add_argument("--gc-step", type=int, default=37)
    p.add_argument("--junk", type=int, default=1_500_000, help="live container objects for gc to traverse")
    p.add_argument("--ckpt", default="/tmp/slow_iters_ckpt.pt")
    args = p.parse_args(argv)

    import common as cu
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.manual_seed(0)

    def cbr(ci: int, co: int, s: int = 1) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(ci, co, 3, s, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU(inplace=True))

    model = nn.Sequential(cbr(3, 64), cbr(64, 128, 2), cbr(128, 128), cbr(128, 256, 2), cbr(256, 256),
                          cbr(256, 512, 2), cbr(512, 512), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(512, 10)).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(args.batch, 3, args.size, args.size, device=dev).to(memory_format=torch.channels_last)
    x_big = torch.randn(args.batch, 3, args.size + 32, args.size + 32, device=dev).to(
        memory_format=torch.channels_last)
    y = torch.randint(0, 10, (args.batch,), device=dev)
    junk = [[i] for i in range(args.junk)]  # live containers: a full gc traverses them
    reasons: dict[int, str] = {}

    def step(i: int | None) -> float:
        inp = x_big if i == args.shape_step else x
        loss = F.cross_entropy(model(inp), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        v = loss.item()
        if i is not None and i % args.ckpt_every == args.ckpt_every - 1:
            with cu.nvtx_range("checkpoint"):
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": i}, args.ckpt)
            reasons[i] = "checkpoint"
        if i == args.gc_step:
            with cu.nvtx_range("gc"):
                gc.collect()
            reasons[i] = "gc.collect"
        if i == args.shape_step:
            reasons[i] = f"new input shape {args.size + 32}x{args.size + 32} (cudnn.benchmark autotunes)"
        return v

    with cu.nvtx_range("warmup"):
        for _ in range(args.warmup):
            step(None)
    torch.cuda.synchronize()
    dts = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        with cu.nvtx_range("train_step"):
            step(i)
        dts.append(time.perf_counter() - t0)
    ms = [v * 1e3 for v in dts]
    med = statistics.median(ms)
    slow = [(i, v) for i, v in enumerate(ms) if v > 2 * med]
    nparams = sum(q.numel() for q in model.parameters())
    print(f"[slow_iters] {args.steps} steps (after {args.warmup} warm-up), conv net {nparams / 1e6:.1f} M params, "
          f"batch {args.batch}x3x{args.size}x{args.size}, cudnn.benchmark on, {len(junk)} live lists; per step p50 "
          f"{med:.3f} ms, mean {statistics.mean(ms):.3f} ms", file=sys.stderr, flush=True)
    print("[slow_iters] step ms: " + " ".join(f"{v:.2f}" for v in ms), file=sys.stderr, flush=True)
    print("[slow_iters] steps > 2x p50: " + "; ".join(f"{i}: {v:.2f} ms ({reasons.get(i, '?')})" for i, v in slow),
          file=sys.stderr, flush=True)
    if os.path.exists(args.ckpt):
        os.remove(args.ckpt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
