"""Loops for the "why the GPU waits, how hard it works" inputs (issue 24): native CPU work, syncs,
pageable copies and allocations in the loop, and named phases for GPU metrics.

* ``--mode native``: each step (NVTX range ``step``, nothing inside annotated) runs un-annotated
  NATIVE work on the thread that launches the GPU work, ``sort_records()`` (numpy sort) and
  ``pack_log()`` (zlib), then ``upload()``: a ``cudaMalloc`` of a scratch buffer and a synchronous
  ``cudaMemcpy`` from pageable host memory into it, plus ``torch.from_numpy(...).to("cuda")`` (a
  pageable ``cudaMemcpyAsync`` + ``cudaStreamSynchronize``), then an FP32 MLP forward (about 11
  ms), then ``read_loss()`` (``.item()``: ``cudaStreamSynchronize``), ``torch.cuda.synchronize()``
  and a ``cudaFree`` of the scratch buffer. Record with CPU sampling and CUDA backtraces and NO Python
  sampling (native frames only)::

      nsys profile -t cuda,nvtx,osrt -s process-tree --cudabacktrace=all --python-sampling=false \\
          --export sqlite -o waits_native python3 workloads/host/diagnose.py --mode native

* ``--mode sync``: the same loop with un-annotated PYTHON functions instead of the native work,
  ``prepare_batch()`` (string work) and ``augment()`` (list arithmetic). Record with CPU + Python
  sampling, CUDA + Python backtraces, and export with blobs (Python frames live in them).

* ``--mode mix``: an NVTX ``step`` range per round holding named phases (each its own NVTX range):
  ``h2d_copy`` / ``d2h_copy`` (512 MiB pinned copies: PCIe-bound), ``fp32_matmul`` (4096^3 FP32 with
  TF32 off: matmul-heavy, tensor cores idle), ``bf16_matmul`` (8192^3 BF16: tensor-bound),
  ``elementwise`` (passes over 1 GiB tensors: DRAM-bound), ``tiny_kernels`` (3,000 one-block
  kernels: SMs mostly idle). Record with GPU metrics (``--gpu-metrics-devices=0``).

* ``--mode full``: ``sync``, then ``mix``, then a launch-heavy tail in one process (big exports).

Timings (``[diagnose]`` lines): per step, a synchronized step's wall clock; per phase, CUDA events, rate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py
import common as cu

RNG = np.random.default_rng(0)
LOG = (b"epoch=3 step=%d loss=0.4321 lr=0.001 grad_norm=1.25 tokens=4096 " * 4096)


def sort_records(n: int = 400_000) -> float:
    """Native: a numpy sort of random keys (no Python frames inside)."""
    a = RNG.random(n)
    a.sort()
    return float(a[n // 2])


def pack_log(reps: int = 2) -> int:
    """Native: zlib compression of a log buffer."""
    size = 0
    for _ in range(reps):
        size += len(zlib.compress(LOG, 6))
    return size


def prepare_batch(n: int = 5000) -> list[int]:
    """Pure-Python string work (pre-processing nobody annotates)."""
    text = "pack my box with five dozen liquor jugs " * 8
    out = []
    for i in range(n):
        w = text[(i * 11) % 280:(i * 11) % 280 + 10]
        out.append(sum(ord(c) for c in w) % 997)
    return out


def augment(tokens: list[int]) -> list[float]:
    """Pure-Python arithmetic on the batch."""
    acc = 0.0
    feats = []
    for t in tokens[:3000]:
        acc = 0.8 * acc + 0.2 * t
        feats.append(acc / 997.0)
    return feats


def _step_loop(mode: str, steps: int) -> list[float]:
    import torch

    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(4)]).to(dev)
    x = torch.randn(4096, 4096, device=dev)
    host = cu.HostBuffer.pageable((4 * 1024 * 1024,), np.float32)  # 16 MiB pageable
    host.array[:] = 0.5
    side = np.ones(1024 * 1024, dtype=np.float32)  # 4 MiB pageable, through torch

    def upload() -> tuple[cu.DeviceArray, torch.Tensor]:
        scratch = cu.DeviceArray(host.array.shape, np.float32)  # cudaMalloc every step
        cu.memcpy(scratch.ptr, host.ptr, host.nbytes, cu.H2D)
        t = torch.from_numpy(side).to(dev)  # pageable cudaMemcpyAsync + sync
        return scratch, t

    def read_loss(y: torch.Tensor) -> float:
        return float(y.sum().item())

    dts = []
    for i in range(steps):
        t0 = time.perf_counter()
        with cu.nvtx_range("step"):
            if mode == "native":
                bias = sort_records() + pack_log() * 1e-9
            else:
                bias = augment(prepare_batch())[-1]
            scratch, side_t = upload()
            s = torch.as_tensor(scratch, device=dev)
            with torch.no_grad():
                y = model(x + bias + s[:4096] * 1e-3 + side_t[:4096] * 1e-3)
            read_loss(y)
            torch.cuda.synchronize()
            del s
            scratch.free()  # cudaFree every step
        dts.append((time.perf_counter() - t0) * 1e3)
    host.release()
    return dts


def _report_steps(mode: str, dts: list[float]) -> None:
    steady = dts[5:] or dts
    t0 = time.perf_counter()
    if mode == "native":
        sort_records()
        t_a = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        pack_log()
        t_b = (time.perf_counter() - t0) * 1e3
        parts = f"sort_records {t_a:.3f} ms, pack_log {t_b:.3f} ms"
    else:
        toks = prepare_batch()
        t_a = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        augment(toks)
        t_b = (time.perf_counter() - t0) * 1e3
        parts = f"prepare_batch {t_a:.3f} ms, augment {t_b:.3f} ms"
    print(f"[diagnose] mode {mode}: {len(dts)} steps, per step mean {statistics.mean(steady):.3f} ms, "
          f"p50 {statistics.median(steady):.3f} ms (steps 6-{len(dts)}); {parts} (timed once after the loop)",
          file=sys.stderr, flush=True)


def _mix(rounds: int) -> None:
    import torch

    dev = torch.device("cuda")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    n_copy = 128 * 1024 * 1024  # 512 MiB fp32
    h_buf = torch.empty(n_copy, dtype=torch.float32, pin_memory=True)
    h_buf.fill_(1.0)
    d_buf = torch.empty(n_copy, dtype=torch.float32, device=dev)
    fa = torch.randn(4096, 4096, device=dev)
    fb = torch.randn(4096, 4096, device=dev)
    ba = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    bb = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    big_a = torch.randn(256 * 1024 * 1024, device=dev)  # 1 GiB fp32
    big_b = torch.empty_like(big_a)
    tiny = torch.zeros(16, device=dev)
    phases = {
        "h2d_copy": (4, lambda: d_buf.copy_(h_buf, non_blocking=True), 4 * n_copy * 4, "GB/s"),
        "d2h_copy": (4, lambda: h_buf.copy_(d_buf, non_blocking=True), 4 * n_copy * 4, "GB/s"),
        "fp32_matmul": (10, lambda: torch.mm(fa, fb), 10 * 2 * 4096 ** 3, "TFLOP/s"),
        "bf16_matmul": (20, lambda: torch.mm(ba, bb), 20 * 2 * 8192 ** 3, "TFLOP/s"),
        "elementwise": (20, lambda: (torch.add(big_a, 1.0, out=big_b), torch.mul(big_b, 0.5, out=big_a)),
                        20 * 2 * 2 * big_a.numel() * 4, "GB/s"),
        "tiny_kernels": (3000, lambda: tiny.add_(1.0), 3000, "kernels/ms"),
    }
    gpu_ms: dict[str, list[float]] = {k: [] for k in phases}
    wall_ms: dict[str, list[float]] = {k: [] for k in phases}
    # one warm-up pass outside the NVTX ranges (cuBLAS handles, kernels loaded)
    for reps, fn, _, _ in phases.values():
        fn()
    torch.cuda.synchronize()
    for _ in range(rounds):
        with cu.nvtx_range("step"):
            for name, (reps, fn, work, unit) in phases.items():
                ev0 = torch.cuda.Event(enable_timing=True)
                ev1 = torch.cuda.Event(enable_timing=True)
                t0 = time.perf_counter()
                with cu.nvtx_range(name):
                    ev0.record()
                    for _ in range(reps):
                        fn()
                    ev1.record()
                    ev1.synchronize()
                wall_ms[name].append((time.perf_counter() - t0) * 1e3)
                gpu_ms[name].append(ev0.elapsed_time(ev1))
    for name, (reps, _, work, unit) in phases.items():
        g = statistics.median(gpu_ms[name])
        if unit == "GB/s":
            rate = f"{work / (g * 1e-3) / 1e9:.1f} GB/s"
        elif unit == "TFLOP/s":
            rate = f"{work / (g * 1e-3) / 1e12:.1f} TFLOP/s"
        else:
            rate = f"{work / g:.1f} kernels/ms"
        print(f"[diagnose] mode mix: {name}: {reps} ops, GPU {g:.3f} ms (CUDA events, median of {rounds}), "
              f"wall {statistics.median(wall_ms[name]):.3f} ms, {rate}", file=sys.stderr, flush=True)


def _launch_tail(steps: int, kernels: int) -> None:
    import torch

    x = torch.ones(4096, device="cuda")
    t0 = time.perf_counter()
    for _ in range(steps):
        with cu.nvtx_range("launch_step"):
            for _ in range(kernels):
                x = x.mul(1.0001).add_(0.0001)
    torch.cuda.synchronize()
    print(f"[diagnose] mode full: launch tail {steps} x {kernels} kernels, "
          f"{(time.perf_counter() - t0) * 1e3 / steps:.3f} ms per step", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["native", "sync", "mix", "full"], default="sync")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    steps = 6 if args.quick else args.steps
    rounds = 1 if args.quick else args.rounds
    if args.mode in ("native", "sync"):
        _report_steps(args.mode, _step_loop(args.mode, steps))
    elif args.mode == "mix":
        _mix(rounds)
    else:
        _report_steps("sync", _step_loop("sync", steps))
        _mix(rounds)
        _launch_tail(steps, 100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
