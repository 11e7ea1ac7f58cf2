"""Gradient accumulation with DistributedDataParallel: k micro-batches per optimizer step (start it with ``torchrun``).

Every optimizer step (NVTX range ``train_step``) runs ``--accum`` micro-batches (NVTX range
``micro_batch`` each: pick the batch, forward, ``loss / k``, backward). The first k-1 run under
``model.no_sync()``, so DDP all-reduces the accumulated gradients only in the backward of the last
micro-batch; then the optimizer (NVTX range ``optimizer``: AdamW step, zero_grad) and the loss
read (``loss.item()``: one synchronization per optimizer step). Warm-up steps run in a ``warmup``
range, then the ranks meet at a barrier. NVLink multicast stays off.

``--slow-rank R --slow-ms MS``: rank R does MS milliseconds of extra host work (a Python spin, as a
slow input pipeline would) when it picks the batch of the FIRST micro-batch of every step (NVTX range
``load_batch``); the other ranks wait for it once per step, in the all-reduce of the last micro-batch.

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --osrt-threshold=10000 --export sqlite \\
        -o grad_accum python3 -m torch.distributed.run --nproc_per_node=2 workloads/training/grad_accum.py

Each rank prints its own timings (``[grad_accum]`` lines): wall time per optimizer step (it ends
with the loss read, so the clock sees the GPU's end), mean and p50; and, from CUDA events recorded
around each micro-batch and the optimizer on the compute stream (read after the run), the GPU-stream
time of micro-batches 1..k-1 (no all-reduce), of micro-batch k (with the all-reduce) and of the
optimizer, mean per step.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import common as cu
import loops

loops.no_multicast()


def main(argv: list[str] | None = None) -> int:
    p = loops.parser(__doc__, steps=30, warmup=3, quick=True)
    p.add_argument("--accum", type=int, default=4, help="micro-batches per optimizer step")
    p.add_argument("--micro-batch", type=int, default=2048)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0)
    args = loops.parse(p, argv)

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, local, dev, world = loops.init_nccl()
    d, k = args.width, args.accum
    mods: list[nn.Module] = []
    for _ in range(args.layers):
        mods += [nn.Linear(d, d), nn.GELU()]
    model = DDP(nn.Sequential(*mods, nn.Linear(d, 10)).to(dev), device_ids=[local])
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
    g = torch.Generator(device=dev)
    g.manual_seed(rank)
    batches = [(torch.randn(args.micro_batch, d, device=dev, generator=g),
                torch.randint(0, 10, (args.micro_batch,), device=dev, generator=g)) for _ in range(8)]
    load: list[float] = []

    def load_batch(i: int, m: int):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        with cu.nvtx_range("load_batch"):
            if rank == args.slow_rank and args.slow_ms > 0 and m == 0:
                loops.spin(args.slow_ms)
            out = batches[(i * k + m) % len(batches)]
        load.append(time.perf_counter() - t0)
        return out

    events: list[list] = []  # per timed step: k + 2 CUDA events (micro-batch bounds, optimizer end)

    def step(i: int, timed: bool) -> float:
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(k + 2)] if timed else None
        if ev:
            ev[0].record()
        total = torch.zeros((), device=dev)
        for m in range(k):
            with cu.nvtx_range("micro_batch"):
                x, y = load_batch(i, m)
                ctx = model.no_sync() if m < k - 1 else contextlib.nullcontext()
                with ctx:
                    loss = F.cross_entropy(model(x), y) / k
                    loss.backward()
                total += loss.detach()
            if ev:
                ev[m + 1].record()
        with cu.nvtx_range("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        if ev:
            ev[k + 1].record()
            events.append(ev)
        return total.item()

    def between() -> None:
        loops.barrier()
        load.clear()

    ms, losses = loops.warm_then_time(step, args.steps, args.warmup, between)
    torch.cuda.synchronize()
    mb_first = [statistics.mean(e[m].elapsed_time(e[m + 1]) for m in range(k - 1)) for e in events]
    mb_last = [e[k - 1].elapsed_time(e[k]) for e in events]
    opt_ms = [e[k].elapsed_time(e[k + 1]) for e in events]
    nparams = sum(q.numel() for q in params)
    print(f"[grad_accum] rank {rank}/{world} pid {os.getpid()} cuda:{local}: {args.steps} optimizer steps (after "
          f"{args.warmup} warm-up) x {k} micro-batches of {args.micro_batch}, {args.layers} layers width {d}, "
          f"{nparams / 1e6:.1f} M params, slow rank {args.slow_rank} (+{args.slow_ms} ms host work in micro-batch 1): "
          f"{loops.mean_p50(ms, 'per optimizer step')}; "
          f"load_batch mean {statistics.mean(load) * 1e3:.3f} ms; loss {losses[0]:.4f} -> {losses[-1]:.4f}",
          file=sys.stderr, flush=True)
    print(f"[grad_accum] rank {rank}: CUDA events on the compute stream, mean per step: micro-batches 1..{k - 1} "
          f"(no all-reduce) {statistics.mean(mb_first):.3f} ms each, micro-batch {k} (all-reduce) "
          f"{statistics.mean(mb_last):.3f} ms (p50 {statistics.median(mb_last):.3f}), optimizer "
          f"{statistics.mean(opt_ms):.3f} ms", file=sys.stderr, flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
