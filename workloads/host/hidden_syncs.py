"""Hidden synchronizations in a training loop, and the same loop without them (issue 49 item 1).

An MLP classifier trained with AdamW on batches already on the GPU (no host copies). Some labels are
ignored (``-1``). Each step is one NVTX range ``train_step``.

* ``--mode mask``: the loss keeps the valid rows with a boolean mask, ``out[valid]`` and
  ``y[valid]`` (each a ``nonzero`` inside PyTorch: the host waits for the GPU to learn how many rows
  there are), and the loop logs ``loss.item()`` every step (a device-to-host copy the host waits
  for): three synchronizations a step, each followed by GPU idle while the queue refills.
* ``--mode none``: masked arithmetic instead (``cross_entropy(..., reduction="none") * valid``,
  divided by the valid count on the GPU), the loss accumulated on the GPU and read every 50 steps.
* ``--measure N``: no profiler; N pairs of runs of both modes in one process, alternating which runs
  first, each timed over ``--steps`` steps (after a warm-up, synchronized at both ends): per-step ms.

Record with CUDA + Python backtraces (the sync's call site) and Python sampling::

    nsys profile -t cuda,nvtx,osrt -s process-tree --python-sampling=true \\
        --cudabacktrace=all --python-backtrace=cuda -o syncs_mask python3 workloads/host/hidden_syncs.py --mode mask
    nsys export --type sqlite --include-blobs=true -o syncs_mask.sqlite syncs_mask.nsys-rep

It prints its own timings (``[hidden_syncs]`` lines).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

READ_EVERY = 50  # --mode none: the accumulated loss is read every this many steps


def build(width: int, layers: int, classes: int, batch: int, pool: int, seed: int = 0):  # type: ignore[no-untyped-def]
    import torch

    torch.manual_seed(seed)
    dev = torch.device("cuda")
    mods: list[torch.nn.Module] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*mods, torch.nn.Linear(width, classes)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    xs = torch.randn(pool, batch, width, device=dev)
    # about 1 label in 8 ignored (-1)
    ys = torch.randint(-1, 7, (pool, batch), device=dev)
    ys = torch.where(ys >= 0, torch.randint(0, classes, (pool, batch), device=dev), ys)
    return model, opt, xs, ys


def loss_mask(out, y):  # type: ignore[no-untyped-def]
    import torch.nn.functional as F

    valid = y >= 0
    return F.cross_entropy(out[valid], y[valid])  # boolean indexing: nonzero, a host sync each


def loss_masked_arith(out, y):  # type: ignore[no-untyped-def]
    import torch.nn.functional as F

    valid = (y >= 0).to(out.dtype)
    per_row = F.cross_entropy(out, y.clamp(min=0), reduction="none")
    return (per_row * valid).sum() / valid.sum().clamp(min=1.0)  # stays on the GPU


def run(mode: str, model, opt, xs, ys, steps: int, first: int, log: list[float], nvtx: bool) -> None:  # type: ignore[no-untyped-def]
    import torch

    acc = torch.zeros((), device=xs.device)
    for i in range(first, first + steps):
        if nvtx:
            torch.cuda.nvtx.range_push("train_step")
        x, y = xs[i % len(xs)], ys[i % len(ys)]
        opt.zero_grad(set_to_none=True)
        out = model(x)
        if mode == "mask":
            loss = loss_mask(out, y)
        else:
            loss = loss_masked_arith(out, y)
        loss.backward()
        opt.step()
        if mode == "mask":
            log.append(loss.item())  # every step: the host waits for the GPU
        else:
            acc += loss.detach()
            if (i + 1) % READ_EVERY == 0:
                log.append(acc.item() / READ_EVERY)  # every READ_EVERY steps
                acc.zero_()
        if nvtx:
            torch.cuda.nvtx.range_pop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["mask", "none"], default="mask")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--measure", type=int, default=0, help="pairs of timed runs of both modes, no NVTX")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--batch", type=int, default=16384)
    args = p.parse_args(argv)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    model, opt, xs, ys = build(args.width, args.layers, args.classes, args.batch, pool=8)
    log: list[float] = []
    shape = f"MLP {args.layers}x{args.width} -> {args.classes}, batch {args.batch}, AdamW foreach, TF32"
    if args.measure:
        for m in ("mask", "none"):  # warm both paths (kernels loaded, allocator settled)
            run(m, model, opt, xs, ys, args.warmup, 0, log, nvtx=False)
        torch.cuda.synchronize()
        per: dict[str, list[float]] = {"mask": [], "none": []}
        for k in range(args.measure):
            order = ("mask", "none") if k % 2 == 0 else ("none", "mask")
            for m in order:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                run(m, model, opt, xs, ys, args.steps, 0, log, nvtx=False)
                torch.cuda.synchronize()
                per[m].append((time.perf_counter() - t0) * 1e3 / args.steps)
            print(f"[hidden_syncs] pair {k + 1} ({order[0]} first): per step mask {per['mask'][-1]:.4f} ms, "
                  f"none {per['none'][-1]:.4f} ms, gain {per['mask'][-1] - per['none'][-1]:.4f} ms", flush=True)
        mm, mn = statistics.mean(per["mask"]), statistics.mean(per["none"])
        print(f"[hidden_syncs] measured ({shape}; {args.measure} pairs x {args.steps} steps, no profiler): "
              f"per step mask {mm:.4f} ms, none {mn:.4f} ms, gain {mm - mn:.4f} ms ({(mm - mn) / mm:.1%} of the step)")
        return 0
    run(args.mode, model, opt, xs, ys, args.warmup, 0, log, nvtx=False)  # warm-up, outside the NVTX ranges
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    run(args.mode, model, opt, xs, ys, args.steps, 0, log, nvtx=True)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / args.steps
    print(f"[hidden_syncs] mode {args.mode}: {args.steps} steps ({shape}), per step mean {ms:.4f} ms under the "
          f"profiler; loss reads {len(log)}, last {log[-1]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
