"""An optimizer that loops over parameters, and the same optimizer fused (issue 49 item 2).

A stack of ``--blocks`` LayerNorm + Linear blocks of width ``--width`` (4 small parameters a block:
200 by default) trained with Adam on batches already on the GPU. Each step is one NVTX range
``train_step`` and ``opt.step()`` inside it one NVTX range ``optimizer``.

* ``--optimizer foreach_false``: ``torch.optim.Adam(..., foreach=False)``: a Python loop over the
  parameters, several small element-wise kernels each (thousands of launches a step).
* ``--optimizer fused``: ``torch.optim.Adam(..., fused=True)``: a few ``multi_tensor_apply`` kernels.
* ``--measure N``: no profiler, no NVTX; N pairs of runs of both modes in one process (two models
  and optimizers, the same seed), alternating which runs first, each timed over ``--steps`` steps
  after a warm-up, synchronized at both ends: per-step ms and the gain.

Profiled runs do ``--warmup`` steps, then ``cudaProfilerStart``, ``--steps`` steps, ``cudaProfilerStop``,
so that a recording with ``--capture-range=cudaProfilerApi`` holds only the steady steps::

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --capture-range=cudaProfilerApi \\
        --capture-range-end=stop -o optim_foreach_false \\
        python3 workloads/training/optimizer_loop.py --optimizer foreach_false

Expected: ``launch-bound`` fires and names the per-parameter optimizer and its flag (foreach_false);
the fused run has no such sentence. It prints its own timings (``[optimizer_loop]`` lines).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def build(mode: str, blocks: int, width: int, seed: int = 0):  # type: ignore[no-untyped-def]
    import torch

    torch.manual_seed(seed)
    mods: list[torch.nn.Module] = []
    for _ in range(blocks):
        mods += [torch.nn.LayerNorm(width), torch.nn.Linear(width, width)]
    model = torch.nn.Sequential(*mods).cuda()
    flag = {"foreach_false": {"foreach": False}, "fused": {"fused": True}}[mode]
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, **flag)
    return model, opt


def run(model, opt, xs, ys, steps: int, nvtx: bool) -> None:  # type: ignore[no-untyped-def]
    import torch

    for i in range(steps):
        if nvtx:
            torch.cuda.nvtx.range_push("train_step")
        x, y = xs[i % len(xs)], ys[i % len(ys)]
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if nvtx:
            torch.cuda.nvtx.range_push("optimizer")
        opt.step()
        if nvtx:
            torch.cuda.nvtx.range_pop()
            torch.cuda.nvtx.range_pop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--optimizer", choices=["foreach_false", "fused"], default="foreach_false")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--measure", type=int, default=0, help="pairs of timed runs of both modes, no profiler, no NVTX")
    p.add_argument("--blocks", type=int, default=50)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--batch", type=int, default=256)
    args = p.parse_args(argv)
    import torch

    xs = torch.randn(4, args.batch, args.width, device="cuda")
    ys = torch.randn(4, args.batch, args.width, device="cuda")
    n_params = 4 * args.blocks
    shape = (f"{args.blocks} x (LayerNorm + Linear) width {args.width}, {n_params} parameters, batch {args.batch}, "
             "Adam")
    if args.measure:
        pair = {m: build(m, args.blocks, args.width) for m in ("foreach_false", "fused")}
        for m, (model, opt) in pair.items():  # warm both (kernels loaded, allocator settled)
            run(model, opt, xs, ys, args.warmup, nvtx=False)
        torch.cuda.synchronize()
        per: dict[str, list[float]] = {"foreach_false": [], "fused": []}
        for k in range(args.measure):
            order = ("foreach_false", "fused") if k % 2 == 0 else ("fused", "foreach_false")
            for m in order:
                model, opt = pair[m]
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                run(model, opt, xs, ys, args.steps, nvtx=False)
                torch.cuda.synchronize()
                per[m].append((time.perf_counter() - t0) * 1e3 / args.steps)
            print(f"[optimizer_loop] pair {k + 1} ({order[0]} first): per step foreach_false "
                  f"{per['foreach_false'][-1]:.4f} ms, fused {per['fused'][-1]:.4f} ms, gain "
                  f"{per['foreach_false'][-1] - per['fused'][-1]:.4f} ms", flush=True)
        a, b = statistics.mean(per["foreach_false"]), statistics.mean(per["fused"])
        print(f"[optimizer_loop] measured ({shape}; {args.measure} pairs x {args.steps} steps, no profiler): per step "
              f"foreach_false {a:.4f} ms, fused {b:.4f} ms, gain {a - b:.4f} ms ({(a - b) / a:.1%} of the step)")
        return 0
    model, opt = build(args.optimizer, args.blocks, args.width)
    run(model, opt, xs, ys, args.warmup, nvtx=False)  # warm-up, before the capture
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    t0 = time.perf_counter()
    run(model, opt, xs, ys, args.steps, nvtx=True)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / args.steps
    torch.cuda.profiler.stop()
    print(f"[optimizer_loop] optimizer {args.optimizer}: {args.steps} steps ({shape}), per step mean {ms:.4f} ms "
          "under the profiler")
    return 0


if __name__ == "__main__":
    sys.exit(main())
