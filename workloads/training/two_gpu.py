"""One process, one model split across cuda:0 and cuda:1: naive model parallelism, or micro-batch pipelining.

The first ``--layers`` Linear+GELU layers live on cuda:0, the next ``--layers`` and the head on
cuda:1. Every ``train_step`` (NVTX range) runs forward, backward and an SGD step on a batch of
``--batch`` rows and reads the loss.

``--mode turns`` (naive): the whole batch goes through cuda:0, is copied to cuda:1 and goes through
the second half; backward runs the other way. At any time only one GPU computes: they take turns.

``--mode pipelined`` (the fix): the batch is split into ``--micro`` micro-batches; the forward of
micro-batch i+1 on cuda:0 is enqueued before the second half of micro-batch i on cuda:1 (as in
PyTorch's model-parallel tutorial), so both GPUs compute at once; backward of the summed loss runs on
autograd's per-device threads, which also overlap.

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --export sqlite -o two_gpu_turns \\
        python3 workloads/training/two_gpu.py --mode turns

A profiler should conclude: turns: the two devices are almost never busy at the same time (the share
of time both compute at once near 0, each GPU idle while the other works); pipelined: a large share
of the busy time overlaps, and the step is shorter.

Prints (``[two_gpu]`` lines) the wall time per step (mean, p50) and the loss.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import loops


def main(argv: list[str] | None = None) -> int:
    p = loops.parser(__doc__, steps=12, warmup=3)
    p.add_argument("--mode", choices=("turns", "pipelined"), default="turns")
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--batch", type=int, default=8192)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--layers", type=int, default=4, help="layers per GPU")
    args = p.parse_args(argv)

    import torch
    import torch.nn.functional as F
    from torch import nn

    assert torch.cuda.device_count() >= 2, "needs two GPUs"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(0)
    d0, d1 = torch.device("cuda", 0), torch.device("cuda", 1)
    d = args.width

    def block(n: int) -> nn.Sequential:
        mods: list[nn.Module] = []
        for _ in range(n):
            mods += [nn.Linear(d, d), nn.GELU()]
        return nn.Sequential(*mods)

    part0 = block(args.layers).to(d0)
    part1 = nn.Sequential(block(args.layers), nn.Linear(d, 10)).to(d1)
    params = list(part0.parameters()) + list(part1.parameters())
    opt = torch.optim.SGD(params, lr=1e-4)
    x = torch.randn(args.batch, d, device=d0)
    y = torch.randint(0, 10, (args.batch,), device=d1)

    def forward_loss() -> torch.Tensor:
        if args.mode == "turns":
            return F.cross_entropy(part1(part0(x).to(d1)), y)
        xs, ys = x.chunk(args.micro), y.chunk(args.micro)
        losses = []
        nxt = part0(xs[0]).to(d1)
        for i in range(args.micro):
            cur = nxt
            if i + 1 < args.micro:
                nxt = part0(xs[i + 1]).to(d1)  # cuda:0 works on i+1 ...
            losses.append(F.cross_entropy(part1(cur), ys[i]))  # ... while cuda:1 works on i
        return torch.stack(losses).mean()

    def step() -> float:
        loss = forward_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    def timed_step(i: int, timed: bool) -> float:
        loss = step()
        if timed:
            torch.cuda.synchronize(d0)
        return loss

    def drain() -> None:
        torch.cuda.synchronize(d0)
        torch.cuda.synchronize(d1)

    ms, losses = loops.warm_then_time(timed_step, args.steps, args.warmup, drain)
    print(f"[two_gpu] mode {args.mode}: {args.layers}+{args.layers} layers of width {d} on cuda:0/cuda:1, batch "
          f"{args.batch}{f' in {args.micro} micro-batches' if args.mode == 'pipelined' else ''}; {args.steps} steps "
          f"(after {args.warmup} warm-up): {loops.mean_p50(ms)}; loss {losses[0]:.4f} -> {losses[-1]:.4f}",
          file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
