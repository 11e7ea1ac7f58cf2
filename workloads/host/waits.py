"""Why the GPU waits, and how hard it works: two loops for CPU/Python sampling, backtraces and GPU metrics.

* ``--mode python``: each step (NVTX range ``step``, nothing else annotated) runs two plain Python
  functions on the thread that launches the GPU work, ``tokenize()`` (~3 ms of string work) and
  ``featurize()`` (~1 ms of list arithmetic), then a small MLP forward on the GPU, then
  ``fetch_result()`` reads the result (``.item()``: a ``cudaStreamSynchronize``/``cudaMemcpy``). The GPU
  idles while the Python functions run. Record with CPU + Python sampling and CUDA + Python
  backtraces, and export with blobs (Python frames live in them)::

      nsys profile -t cuda,nvtx,osrt -s process-tree --python-sampling=true \\
          --cudabacktrace=all --python-backtrace=cuda -o waits_python python3 workloads/host/waits.py --mode python
      nsys export --type sqlite --include-blobs=true -o waits_python.sqlite waits_python.nsys-rep

* ``--mode phases``: three phases per round in their own NVTX ranges: ``memory_bound`` (elementwise
  passes over 1 GiB tensors), ``tensor_bound`` (BF16 8192^3 matmuls), ``launch_bound`` (2,000 tiny
  kernels); record with GPU metrics (``--gpu-metrics-devices=0``). Timings per step / phase: ``[waits]`` lines.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py
import common as cu


def tokenize(n: int = 6000) -> list[int]:
    """Pure-Python string work (the kind of pre-processing nobody annotates)."""
    text = "the quick brown fox jumps over the lazy dog " * 8
    out = []
    for i in range(n):
        w = text[(i * 7) % 300:(i * 7) % 300 + 12]
        out.append(sum(ord(c) for c in w) % 1000)
    return out


def featurize(tokens: list[int]) -> list[float]:
    """Pure-Python arithmetic on the tokens."""
    acc = 0.0
    feats = []
    for t in tokens[:2000]:
        acc = 0.9 * acc + 0.1 * t
        feats.append(acc / 1000.0)
    return feats


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["python", "phases"], default="python")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    import torch

    dev = torch.device("cuda")
    torch.manual_seed(0)
    if args.mode == "python":
        model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(6)]).to(dev)
        x = torch.randn(2048, 1024, device=dev)

        def fetch_result(y: torch.Tensor) -> float:
            return float(y.sum().item())

        dts = []
        steps = 5 if args.quick else args.steps
        for i in range(steps):
            t0 = time.perf_counter()
            with cu.nvtx_range("step"):
                toks = tokenize()
                feats = featurize(toks)
                with torch.no_grad():
                    y = model(x + feats[-1])
                fetch_result(y)
            dts.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        tokenize()
        t_tok = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        featurize(toks)
        t_feat = (time.perf_counter() - t0) * 1e3
        print(f"[waits] mode python: {steps} steps, per step mean {statistics.mean(dts[5:] or dts):.3f} ms, "
              f"p50 {statistics.median(dts[5:] or dts):.3f} ms; tokenize {t_tok:.3f} ms, featurize {t_feat:.3f} ms "
              f"(timed once after the loop)", file=sys.stderr, flush=True)
        return 0
    big_a = torch.randn(256 * 1024 * 1024, device=dev)  # 1 GiB fp32
    big_b = torch.empty_like(big_a)
    ma = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    mb = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    tiny = torch.zeros(16, device=dev)
    times: dict[str, list[float]] = {"memory_bound": [], "tensor_bound": [], "launch_bound": []}
    rounds = 1 if args.quick else args.rounds
    for _ in range(rounds):
        for phase in times:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with cu.nvtx_range(phase):
                if phase == "memory_bound":
                    for _ in range(40):
                        torch.add(big_a, 1.0, out=big_b)
                        torch.mul(big_b, 0.5, out=big_a)
                elif phase == "tensor_bound":
                    for _ in range(40):
                        ma = (ma @ mb) * 1e-4
                else:
                    for _ in range(2000):
                        tiny.add_(1.0)
                torch.cuda.synchronize()
            times[phase].append((time.perf_counter() - t0) * 1e3)
    print("[waits] mode phases: " + ", ".join(f"{k} {statistics.median(v):.2f} ms (p50 of {len(v)})"
                                              for k, v in times.items()), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
