"""Two training processes on ONE GPU, each with its own NCCL all-reduce of the gradients.

The launcher (this file without ``--worker``) starts two copies of itself (``subprocess``), each
with its own ``MASTER_PORT``, and waits for both. Each worker initializes ``torch.distributed``
with the NCCL backend in a world of size 1 (rank 0 of 1: no GPU is shared between ranks), trains a
small MLP on cuda:0 and, after backward, all-reduces (AVG, ``async_op=True`` then ``wait()``, as
DDP's bucket hook does: the collective runs on ProcessGroupNCCL's own stream) its flattened
gradients (one bucket) before the optimizer step; the loss is read every step (one sync). Each
step is an NVTX range ``train_step``; NCCL's own NVTX ranges (``ncclAllReduce`` ..., domain NCCL)
land inside it.
NVLink multicast stays off (``NCCL_NVLS_ENABLE=0``).

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --export sqlite -o two_procs \\
        python3 workloads/training/two_procs.py

After ``--warmup`` untimed steps (NVTX range ``warmup``) the workers meet at a file barrier (NVTX
range ``barrier``), so their timed steps run at the same time and share the GPU (time-sliced).
Each worker prints its own timings: wall time per step (the step ends with the loss read), mean
and p50, and steps/s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import common as cu

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")  # one rank per world: NCCL's bootstrap stays on loopback


def barrier(folder: str, me: int, n: int, timeout: float = 120.0) -> None:
    """A file barrier between the worker processes (they are in different worlds of size 1)."""
    open(os.path.join(folder, f"ready.{me}"), "w").close()
    t0 = time.monotonic()
    while sum(os.path.exists(os.path.join(folder, f"ready.{i}")) for i in range(n)) < n:
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"worker {me}: the other workers never reached the barrier")
        time.sleep(0.001)


def worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn

    rank_id = args.worker
    torch.cuda.set_device(0)
    dev = torch.device("cuda:0")
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{args.port}", rank=0, world_size=1,
                            device_id=dev)
    torch.manual_seed(rank_id)
    d = args.width
    model = nn.Sequential(nn.Linear(512, d), nn.GELU(), nn.Linear(d, d), nn.GELU(), nn.Linear(d, d), nn.GELU(),
                          nn.Linear(d, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    params = list(model.parameters())
    xs = torch.randn(args.batch, 512, device=dev)
    ys = torch.randint(0, 10, (args.batch,), device=dev)

    def step() -> float:
        loss = F.cross_entropy(model(xs), ys)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params])  # one gradient bucket
        # async + wait, as DDP's bucket hook does: the collective runs on ProcessGroupNCCL's own stream
        # (a synchronous one would run on the current stream); AVG: NCCL runs a kernel even for one rank
        dist.all_reduce(flat, op=dist.ReduceOp.AVG, async_op=True).wait()
        off = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[off:off + n].view_as(p.grad))
            off += n
        opt.step()
        return loss.item()

    with cu.nvtx_range("warmup"):
        for _ in range(args.warmup):
            step()
    torch.cuda.synchronize()
    with cu.nvtx_range("barrier"):  # both workers start their timed steps together (they share the GPU)
        barrier(args.barrier, rank_id, args.procs)
    dts, losses = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        with cu.nvtx_range("train_step"):
            losses.append(step())
        dts.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    ms = [t * 1e3 for t in dts]
    print(f"[two_procs] worker {rank_id} pid {os.getpid()} port {args.port}: {args.steps} steps (after "
          f"{args.warmup} warm-up), MLP width {d}, batch {args.batch}, NCCL all_reduce world 1: per step mean "
          f"{statistics.mean(ms):.3f} ms, p50 {statistics.median(ms):.3f} ms; steps/s {args.steps / sum(dts):.1f}; "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--barrier", default=None, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=29511)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.warmup = 4, 2
    if args.worker is not None:
        return worker(args)
    procs = []
    args.barrier = tempfile.mkdtemp(prefix="two_procs-")
    for i in range(args.procs):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(args.port + i), "RANK": "0",
               "WORLD_SIZE": "1", "LOCAL_RANK": "0", "NCCL_NVLS_ENABLE": "0"}
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", str(i), "--port", str(args.port + i),
               "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
               "--width", str(args.width), "--procs", str(args.procs), "--barrier", args.barrier]
        procs.append(subprocess.Popen(cmd, env=env))
    rcs = [pr.wait() for pr in procs]
    shutil.rmtree(args.barrier, ignore_errors=True)
    print(f"[two_procs] launcher: {args.procs} workers on one GPU, return codes {rcs}", file=sys.stderr)
    return max(abs(rc) for rc in rcs)


if __name__ == "__main__":
    sys.exit(main())
