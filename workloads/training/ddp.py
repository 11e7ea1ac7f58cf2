"""Distributed training on several GPUs over NCCL, one process a GPU (start it with ``torchrun``).

Modes (``--mode``):

* ``ddp``: stock ``DistributedDataParallel`` (gradient buckets all-reduced while backward runs:
  communication overlapped with compute);
* ``serial``: the same model without DDP; after ``loss.backward()`` every gradient is all-reduced
  one by one (``dist.all_reduce``, AVG) before the optimizer step: the all-reduce forced after
  backward, nothing to overlap it with;
* ``tp``: tensor parallel (Megatron-style): each block is a column-parallel then a row-parallel
  linear layer, whose partial outputs are all-reduced inside every forward (and the input
  gradients inside every backward);
* ``fsdp``: ``torch.distributed.fsdp.fully_shard`` per layer (all-gather of the parameters in
  forward and backward, reduce-scatter of the gradients);
* ``pipeline``: two stages (rank 0 the first half of the layers, rank 1 the second half and the
  loss), ``--micro`` micro-batches, activations sent forward and gradients back (NCCL send/recv).

``--nccl-ctas N``: NCCL runs each collective on at most N CTAs (``NCCL_MAX_CTAS``, and the older
``NCCL_MAX_NCHANNELS``), so it takes N of the device's SMs: fewer SMs taken from the compute it
overlaps, at a lower bandwidth.

``--slow-rank R --slow-ms MS``: rank R does MS milliseconds of extra host work (a Python spin, as
a slow input pipeline would) in its ``load_batch`` range at the start of every step; the other
ranks wait for it in their first collective.

Every step is an NVTX range ``train_step`` holding ``load_batch`` (host: pick the batch) and the
step, which ends with the loss read (``loss.item()``: one synchronization per step). Warm-up steps
run in a ``warmup`` range, then the ranks meet at a barrier. NVLink multicast stays off
(``NCCL_NVLS_ENABLE=0`` and the variables of the machine this was recorded on).

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --export sqlite -o ddp_overlap \\
        python3 -m torch.distributed.run --nproc_per_node=2 workloads/training/ddp.py --mode ddp
    torchrun --nproc_per_node=2 --no-python nsys profile -t cuda,nvtx,osrt -s none \\
        --export sqlite -o ddp_rank%q{RANK} python3 workloads/training/ddp.py --mode ddp

Each rank prints its own timings (``[ddp]`` lines): wall time per step (the step ends with the
loss read), mean and p50, and the mean time of ``load_batch``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import common as cu
import loops

loops.no_multicast()


def main(argv: list[str] | None = None) -> int:
    p = loops.parser(__doc__, steps=30, warmup=5, quick=True)
    p.add_argument("--mode", choices=["ddp", "serial", "tp", "fsdp", "pipeline"], default="ddp")
    p.add_argument("--batch", type=int, default=8192)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--micro", type=int, default=4, help="micro-batches (pipeline)")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--nccl-ctas", type=int, default=0, help="at most this many CTAs a collective (0: NCCL's choice)")
    args = loops.parse(p, argv)
    if args.nccl_ctas > 0:
        os.environ["NCCL_MAX_CTAS"] = os.environ["NCCL_MAX_NCHANNELS"] = str(args.nccl_ctas)

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn

    rank, local, dev, world = loops.init_nccl()
    d, L = args.width, args.layers

    def mlp(n: int) -> nn.Sequential:
        mods: list[nn.Module] = []
        for _ in range(n):
            mods += [nn.Linear(d, d), nn.GELU()]
        return nn.Sequential(*mods)

    class AllReduceFwd(torch.autograd.Function):  # Megatron's g: all-reduce forward, identity backward
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            dist.all_reduce(x)
            return x

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            return g

    class AllReduceBwd(torch.autograd.Function):  # Megatron's f: identity forward, all-reduce backward
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            return x

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            g = g.clone()
            dist.all_reduce(g)
            return g

    class TPBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Linear(d, 4 * d // world)
            self.down = nn.Linear(4 * d // world, d, bias=False)

        def forward(self, x):  # type: ignore[no-untyped-def]
            h = F.gelu(self.up(AllReduceBwd.apply(x)))
            return x + AllReduceFwd.apply(self.down(h))

    head = nn.Linear(d, 10).to(dev)
    if args.mode == "tp":
        body: nn.Module = nn.Sequential(*[TPBlock() for _ in range(L // 2)]).to(dev)
    elif args.mode == "pipeline":
        half = L // 2
        body = mlp(half).to(dev)
        if rank != world - 1:
            head = None  # type: ignore[assignment]
    else:
        body = mlp(L).to(dev)
    model: nn.Module = nn.Sequential(body, head) if head is not None else body
    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[local])
    elif args.mode == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for layer in body:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
    g = torch.Generator(device=dev)
    g.manual_seed(rank if args.mode in ("ddp", "serial", "fsdp") else 0)
    batches = [(torch.randn(args.batch, d, device=dev, generator=g),
                torch.randint(0, 10, (args.batch,), device=dev, generator=g)) for _ in range(4)]

    load: list[float] = []

    def load_batch(i: int):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        with cu.nvtx_range("load_batch"):
            if rank == args.slow_rank and args.slow_ms > 0:
                loops.spin(args.slow_ms)
            out = batches[i % len(batches)]
        load.append(time.perf_counter() - t0)
        return out

    def step_pipeline(x, y) -> float:  # type: ignore[no-untyped-def]
        mb = args.batch // args.micro
        outs, ins, losses = [], [], []
        for m in range(args.micro):
            if rank == 0:
                a = x[m * mb:(m + 1) * mb]
            else:
                a = torch.empty(mb, d, device=dev)
                dist.recv(a, src=rank - 1)
                a.requires_grad_(True)
            out = model(a)
            ins.append(a)
            if rank == world - 1:
                losses.append(F.cross_entropy(out, y[m * mb:(m + 1) * mb]) / args.micro)
            else:
                dist.send(out.detach(), dst=rank + 1)
                outs.append(out)
        for m in range(args.micro):
            if rank == world - 1:
                losses[m].backward()
            else:
                gr = torch.empty(mb, d, device=dev)
                dist.recv(gr, src=rank + 1)
                outs[m].backward(gr)
            if rank != 0:
                dist.send(ins[m].grad, dst=rank - 1)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = torch.stack(losses).sum() if losses else torch.zeros((), device=dev)
        return loss.item()

    def step(i: int) -> float:
        x, y = load_batch(i)
        if args.mode == "pipeline":
            return step_pipeline(x, y)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if args.mode == "serial":  # every gradient all-reduced after backward, one by one
            for q in params:
                dist.all_reduce(q.grad, op=dist.ReduceOp.AVG)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    def between() -> None:
        loops.barrier()
        load.clear()

    ms, losses = loops.warm_then_time(lambda i, timed: step(i), args.steps, args.warmup, between)
    torch.cuda.synchronize()
    nparams = sum(q.numel() for q in params)
    print(f"[ddp] mode {args.mode} rank {rank}/{world} pid {os.getpid()} cuda:{local}: {args.steps} steps (after "
          f"{args.warmup} warm-up), {L} layers width {d}, batch {args.batch}, {nparams / 1e6:.1f} M params on this "
          f"rank, NCCL CTAs {args.nccl_ctas or 'default'}, slow rank {args.slow_rank} (+{args.slow_ms} ms host work): "
          f"{loops.mean_p50(ms)}; load_batch mean {statistics.mean(load) * 1e3:.3f} ms; "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}",
          file=sys.stderr, flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
