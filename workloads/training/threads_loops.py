"""Several Python worker threads in one process, each with its own loop of GPU work on its own stream.

``--threads`` workers (OS thread names ``worker0``, ``worker1``, ...; set with prctl so the trace
names them) each own a model (an MLP of their own width and depth), a ``torch.cuda.Stream`` and a
loop. Every iteration is an NVTX range ``worker_step`` (the same name on every thread): prepare a
batch on the host (numpy), copy it to the GPU, forward and backward, an SGD step, and read the loss
(``loss.item()``: the thread waits for its own stream once per iteration). Workers differ in size,
so their iteration times differ; they share the GIL and the GPU. The first ``--warmup`` iterations
of each thread run in a ``warmup`` range.

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --osrt-threshold=10000 --export sqlite \\
        -o threads_loops python3 workloads/training/threads_loops.py

Each thread prints its own timings (``[threads_loops]`` lines): wall time per iteration (it ends with
the loss read, so the clock sees the GPU's end), mean and p50, and the host time of the batch
preparation.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import common as cu
import loops
import numpy as np


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=3)
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.iters, args.warmup = 3, 1

    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.zeros(1, device=dev)  # context on the main thread first
    # (width, layers, batch, host-prep floats) per worker: different sizes, different iteration times
    shapes = [(1024, 4, 2048, 200_000), (2048, 6, 4096, 400_000), (1536, 8, 4096, 300_000)]
    results: dict[int, str] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(args.threads)

    def worker(w: int) -> None:
        try:
            loops.name_thread(f"worker{w}")
            torch.cuda.set_device(dev)
            width, layers, batch, nprep = shapes[w % len(shapes)]
            assert nprep >= batch * 64
            torch.manual_seed(w)
            mods: list[nn.Module] = []
            for _ in range(layers):
                mods += [nn.Linear(width, width), nn.GELU()]
            stream = torch.cuda.Stream(device=dev)
            rng = np.random.default_rng(w)
            with torch.cuda.stream(stream):
                model = nn.Sequential(*mods, nn.Linear(width, 10)).to(dev)
                opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
                w_in = torch.randn(64, width, device=dev) * 0.1
            stream.synchronize()
            prep: list[float] = []

            def step() -> float:
                t0 = time.perf_counter()
                raw = rng.standard_normal(nprep, dtype=np.float32)  # host batch preparation
                feats = np.tanh(raw[: batch * 64].reshape(batch, 64))
                labels = (np.abs(feats[:, 0]) * 10).astype(np.int64) % 10
                prep.append(time.perf_counter() - t0)
                with torch.cuda.stream(stream):
                    x = torch.from_numpy(feats).to(dev) @ w_in
                    y = torch.from_numpy(labels).to(dev)
                    loss = F.cross_entropy(model(x), y)
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    return loss.item()

            with cu.nvtx_range("warmup"):
                for _ in range(args.warmup):
                    step()
            start.wait()
            prep.clear()
            dts = []
            for _ in range(args.iters):
                t0 = time.perf_counter()
                with cu.nvtx_range("worker_step"):
                    step()
                dts.append(time.perf_counter() - t0)
            ms = [t * 1e3 for t in dts]
            results[w] = (f"[threads_loops] worker{w} tid {threading.get_native_id()}: {args.iters} iterations "
                          f"(after {args.warmup} warm-up) on its own stream, MLP {layers} layers width {width} "
                          f"batch {batch}: per iteration mean {statistics.mean(ms):.3f} ms, p50 "
                          f"{statistics.median(ms):.3f} ms; host batch prep mean "
                          f"{statistics.mean(prep) * 1e3:.3f} ms")
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
            start.abort()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(w,), name=f"worker{w}") for w in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    for w in sorted(results):
        print(results[w], file=sys.stderr, flush=True)
    print(f"[threads_loops] {args.threads} threads, whole run (incl. setup and warm-up) {wall * 1e3:.1f} ms",
          file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
