"""A 2-stage pipeline over point-to-point NCCL send/recv (start it with ``torchrun --nproc_per_node=2``).

Rank r holds stage r of an MLP (one GPU each). Every ``train_step`` (NVTX range) runs a GPipe
schedule of ``--micro`` micro-batches: all forwards (NVTX ``micro_batch`` each: stage 0 computes and
``dist.send``s the activation; stage 1 ``dist.recv``s it, computes and takes the loss), then all
backwards (NVTX ``micro_batch_bwd`` each: stage 1 backpropagates and sends the activation's gradient;
stage 0 receives it and backpropagates), then the optimizer (SGD) and a loss read on the last stage.
Send/recv are NCCL point-to-point kernels (``ncclDevKernel_SendRecv``) on each rank's GPU.

``--stage0-layers A --stage1-layers B``: the default 6/2 is unbalanced (stage 0 has 3x the layers:
stage 1 waits in its receives most of the step); ``--balanced`` makes it 4/4 (the fix: move layers;
the step then tracks the mean stage, not the slowest). The bubble of GPipe/1F1B with p stages and m
micro-batches is (p-1)/(m+p-1) of the step in the ideal case.

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --export sqlite -o pipe_stages \\
        python3 -m torch.distributed.run --nproc_per_node=2 workloads/training/pipe_stages.py

A profiler should conclude: per stage, kernel busy time per step (stage 0 ~3x stage 1 when
unbalanced), the bottleneck stage (0), stage 1's waiting (in its SendRecv kernels / idle), and the
saving from balancing (slowest stage -> mean).

Each rank prints (``[pipe_stages]`` lines) its wall time per step (mean, p50) and its compute per step
from CUDA events around its forward and backward layers (mean).
"""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import loops

loops.no_multicast()


def main(argv: list[str] | None = None) -> int:
    p = loops.parser(__doc__, steps=10, warmup=3)
    p.add_argument("--micro", type=int, default=4, help="micro-batches per step")
    p.add_argument("--micro-batch", type=int, default=2048)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--stage0-layers", type=int, default=6)
    p.add_argument("--stage1-layers", type=int, default=2)
    p.add_argument("--balanced", action="store_true", help="equal stages: (A+B)/2 layers each")
    args = p.parse_args(argv)
    if args.balanced:
        args.stage0_layers = args.stage1_layers = (args.stage0_layers + args.stage1_layers) // 2

    import common as cu
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn

    rank, local, dev, world = loops.init_nccl(seed=None)
    assert world == 2, "two stages, two ranks"
    d, m, mb = args.width, args.micro, args.micro_batch
    nl = args.stage0_layers if rank == 0 else args.stage1_layers
    mods: list[nn.Module] = []
    for _ in range(nl):
        mods += [nn.Linear(d, d), nn.GELU()]
    stage = nn.Sequential(*mods).to(dev)
    head = nn.Linear(d, 10).to(dev) if rank == 1 else None
    params = list(stage.parameters()) + (list(head.parameters()) if head is not None else [])
    opt = torch.optim.SGD(params, lr=1e-4)
    g = torch.Generator(device=dev)
    g.manual_seed(0)
    xs = [torch.randn(mb, d, device=dev, generator=g) for _ in range(m)]
    ys = [torch.randint(0, 10, (mb,), device=dev, generator=g) for _ in range(m)]
    comp: list[float] = []

    def step(timed: bool) -> float:
        ev: list = []
        outs, ins, losses = [], [], []
        for i in range(m):
            with cu.nvtx_range("micro_batch"):
                if rank == 0:
                    e = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
                    e[0].record()
                    out = stage(xs[i])
                    e[1].record()
                    ev.append(e)
                    dist.send(out.detach(), 1)
                    outs.append(out)
                else:
                    a = torch.empty(mb, d, device=dev)
                    dist.recv(a, 0)
                    a.requires_grad_(True)
                    e = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
                    e[0].record()
                    loss = F.cross_entropy(head(stage(a)), ys[i]) / m
                    e[1].record()
                    ev.append(e)
                    ins.append(a)
                    losses.append(loss)
        for i in range(m):
            with cu.nvtx_range("micro_batch_bwd"):
                if rank == 1:
                    e = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
                    e[0].record()
                    losses[i].backward()
                    e[1].record()
                    ev.append(e)
                    dist.send(ins[i].grad, 0)
                else:
                    gr = torch.empty(mb, d, device=dev)
                    dist.recv(gr, 1)
                    e = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
                    e[0].record()
                    outs[i].backward(gr)
                    e[1].record()
                    ev.append(e)
        with cu.nvtx_range("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        loss_v = sum(x.item() for x in losses) if rank == 1 else 0.0
        torch.cuda.synchronize()
        if timed:
            comp.append(sum(a.elapsed_time(b) for a, b in ev))
        return loss_v

    ms, _ = loops.warm_then_time(lambda i, timed: step(timed), args.steps, args.warmup, loops.barrier)
    print(f"[pipe_stages] rank {rank}/{world} pid {os.getpid()} cuda:{local}: stage {rank} of {nl} layers "
          f"(stages {args.stage0_layers}/{args.stage1_layers}), width {d}, {m} micro-batches of {mb}, GPipe; "
          f"{args.steps} steps (after {args.warmup} warm-up): {loops.mean_p50(ms)}; stage compute (CUDA events, "
          f"fwd+bwd) mean {statistics.mean(comp):.3f} ms "
          f"a step", file=sys.stderr, flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
