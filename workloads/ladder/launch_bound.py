"""A launch-bound loop: many tiny kernels per NVTX step, with and without a CUDA Graph.

Each "step" runs ``--kernels`` small element-wise kernels (a chain of ``x = x * a + b`` on a
``--size``-element tensor). Each kernel runs for a few microseconds, less than it takes the CPU
to launch it, so the GPU idles between kernels. With ``--graph`` the chain is captured once as a
CUDA Graph and each step is a single ``cudaGraphLaunch``.

    nsys profile -t cuda,nvtx,osrt -s none --export sqlite -o launch_eager \\
        python3 workloads/ladder/launch_bound.py
    nsys profile -t cuda,nvtx,osrt -s none --export sqlite -o launch_graph \\
        python3 workloads/ladder/launch_bound.py --graph

Expected findings (nsysan): launch-bound on the eager trace; on the graph trace the graph
launches are recognised and launch-bound no longer fires.
``--steps 4000 --kernels 250`` gives a trace of about a million kernels for benchmarks.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import common as cu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--kernels", type=int, default=100)
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--graph", action="store_true", help="replay the step as one CUDA Graph")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.kernels = 5, 20

    import torch

    x = torch.ones(args.size, device="cuda")
    stream = torch.cuda.Stream()

    def body(t: torch.Tensor) -> torch.Tensor:
        for _ in range(args.kernels):
            t = t.mul(1.0001).add_(0.0001)
        return t

    run = None
    if args.graph:
        with cu.nvtx_range("capture graph"):
            with torch.cuda.stream(stream):
                body(x)  # warm-up before capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = body(x)  # noqa: F841 - kept alive by the graph pool

            def run() -> None:
                graph.replay()

    with torch.cuda.stream(stream):
        with cu.nvtx_range("warm-up"):
            for _ in range(args.warmup):
                run() if run else body(x)
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with cu.nvtx_range("loop"):
            for _ in range(args.steps):
                with cu.nvtx_range("step"):
                    run() if run else body(x)
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
    mode = "graph" if args.graph else "eager"
    print(f"[launch_bound] {mode}: {args.steps} steps x {args.kernels * 2} kernels: "
          f"{elapsed * 1e3:.3f} ms, {elapsed * 1e6 / args.steps:.1f} us/step", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
