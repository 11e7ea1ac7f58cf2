"""Timing methods: why a CPU timer around asynchronous GPU work lies.

The same ResNet-18 forward pass (batch 128, PyTorch) is timed five ways, each phase under its own
NVTX range so the trace shows what each timer actually measured:

  "naive (no warm-up)"       perf_counter around the launch only, first calls included (cuDNN
                             autotuning, lazy module loading): measures launch time, not GPU time
  "naive"                    perf_counter around the launch, after warm-up: still only the launch
  "synchronize"              perf_counter around launch + torch.cuda.synchronize(): correct
  "cuda events"              cudaEventRecord before/after on the stream, cudaEventElapsedTime
  "cuda events (no warm-up)" events, but on a fresh model: the first iteration is an outlier

Every timed iteration is its own NVTX range "iteration" inside the phase range, and the printed
table gives mean, std, p50, p90 and p99 per method.

    nsys profile -t cuda,nvtx,osrt -s none --export sqlite -o timing python3 workloads/ladder/timing.py

Expected findings (nsysan): timing-unsynchronized on the naive phases, warmup-outlier.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import common as cu
import numpy as np


def summarize(name: str, samples_ms: list[float]) -> str:
    a = np.asarray(samples_ms)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return (f"{name:28s} n={a.size:3d} mean={a.mean():8.3f} ms std={a.std():7.3f} "
            f"p50={p50:8.3f} p90={p90:8.3f} p99={p99:8.3f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.batch, args.iters, args.warmup = 16, 5, 2

    import torch
    import torchvision

    torch.backends.cudnn.benchmark = True

    def fresh_model() -> torch.nn.Module:
        with cu.nvtx_range("build model"):
            return torchvision.models.resnet18(weights=None).eval().cuda()

    x = torch.randn(args.batch, 3, 224, 224, device="cuda")
    lines = []

    def cpu_timed(name: str, model: torch.nn.Module, sync: bool) -> None:
        samples = []
        with cu.nvtx_range(name), torch.inference_mode():
            for _ in range(args.iters):
                with cu.nvtx_range("iteration"):
                    t0 = time.perf_counter()
                    model(x)
                    if sync:
                        torch.cuda.synchronize()
                    samples.append((time.perf_counter() - t0) * 1e3)
            torch.cuda.synchronize()  # drain, outside the timers
        lines.append(summarize(name, samples))

    def event_timed(name: str, model: torch.nn.Module) -> None:
        stream = torch.cuda.current_stream().cuda_stream
        start, end = cu.timing_event(), cu.timing_event()
        samples = []
        with cu.nvtx_range(name), torch.inference_mode():
            for _ in range(args.iters):
                with cu.nvtx_range("iteration"):
                    cu.event_record(start, stream)
                    model(x)
                    cu.event_record(end, stream)
                    cu.event_sync(end)
                    samples.append(cu.event_elapsed_ms(start, end))
        lines.append(summarize(name, samples))

    cpu_timed("naive (no warm-up)", fresh_model(), sync=False)
    model = fresh_model()
    with cu.nvtx_range("warm-up"), torch.inference_mode():
        for _ in range(args.warmup):
            model(x)
        torch.cuda.synchronize()
    cpu_timed("naive", model, sync=False)
    cpu_timed("synchronize", model, sync=True)
    event_timed("cuda events", model)
    torch.backends.cudnn.benchmark = False  # a fresh model without autotuning cache effects hidden
    event_timed("cuda events (no warm-up)", fresh_model())
    print("\n".join(lines), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
