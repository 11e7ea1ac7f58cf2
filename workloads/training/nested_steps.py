"""A training loop whose ``train_step`` range also encloses later instances of itself.

A plain single-GPU MLP training loop (forward, backward, AdamW step, ``loss.item()``: one
synchronization a step), every step an NVTX range ``train_step``. The steps run in ``--groups``
groups of ``--inner`` steps, and each group is ALSO wrapped in an NVTX range named ``train_step``
(an outer ``train_step`` around the next ``--inner`` ones on the same thread, as a decorator
applied both to a step function and to the function that loops over it would make), which ends
with the group's own GPU work: a gradient-norm check and a parameter snapshot (a device-to-device
copy of every parameter). There is no separate warm-up: the first steps (cuBLAS and allocator
set-up) run inside the first group.

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --osrt-threshold=10000 --export sqlite \\
        -o nested_steps python3 workloads/training/nested_steps.py

It prints its own timings (``[nested_steps]`` lines): wall time of every inner step (it ends with
the loss read, so the clock sees the GPU's end), mean and p50 over all and over the steps after
the first group's first 3, and the wall time of each group (outer range).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import common as cu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--inner", type=int, default=14)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.groups, args.inner = 2, 3

    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(0)
    dev = torch.device("cuda", 0)
    d = args.width
    mods: list[nn.Module] = []
    for _ in range(args.layers):
        mods += [nn.Linear(d, d), nn.GELU()]
    model = nn.Sequential(*mods, nn.Linear(d, 10)).to(dev)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
    snapshot = [torch.empty_like(q) for q in params]
    g = torch.Generator(device=dev)
    g.manual_seed(0)
    batches = [(torch.randn(args.batch, d, device=dev, generator=g),
                torch.randint(0, 10, (args.batch,), device=dev, generator=g)) for _ in range(4)]

    def step(i: int) -> float:
        x, y = batches[i % len(batches)]
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    steps_ms: list[float] = []
    groups_ms: list[float] = []
    losses: list[float] = []
    i = 0
    for _ in range(args.groups):
        tg = time.perf_counter()
        with cu.nvtx_range("train_step"):  # outer: around the next --inner train_step ranges
            for _ in range(args.inner):
                t0 = time.perf_counter()
                with cu.nvtx_range("train_step"):
                    losses.append(step(i))
                steps_ms.append((time.perf_counter() - t0) * 1e3)
                i += 1
            norm = torch.linalg.vector_norm(torch.stack([q.detach().norm() for q in params]))
            for s, q in zip(snapshot, params):
                s.copy_(q.detach())
            norm.item()
        groups_ms.append((time.perf_counter() - tg) * 1e3)
    torch.cuda.synchronize()
    steady = steps_ms[3:]
    print(f"[nested_steps] {args.groups} groups x {args.inner} steps, MLP {args.layers} layers width {d} batch "
          f"{args.batch}: per step mean {statistics.mean(steps_ms):.3f} ms, p50 {statistics.median(steps_ms):.3f} ms "
          f"(first 3 steps {', '.join(f'{t:.3f}' for t in steps_ms[:3])} ms; after them mean "
          f"{statistics.mean(steady):.3f} ms, p50 {statistics.median(steady):.3f} ms); per group (outer train_step) "
          f"{', '.join(f'{t:.3f}' for t in groups_ms)} ms; loss {losses[0]:.4f} -> {losses[-1]:.4f}",
          file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
