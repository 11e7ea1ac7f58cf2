"""A training loop that waits for its input: blocked on a slow producer thread, or busy preparing it inline.

Every ``train_step`` (NVTX range) gets a batch in a ``data`` range, copies it to the GPU, runs an MLP
forward/backward/SGD step and reads the loss (``loss.item()``), so the GPU idles while the main
thread is in ``data``.

``--mode blocked``: the batches come from a ``queue.Queue(maxsize=2)`` fed by one producer thread
(OS name ``producer``) that needs ``--prep-ms`` per batch, mostly waiting (``time.sleep``, as a
reader of a slow disk or socket would) plus a little numpy. The main thread blocks in
``queue.get()`` (a futex/condition wait: OFF CPU) for most of each ``data`` range. Fix: more
producer workers or a faster source (prefetching in parallel).

``--mode busy``: no thread; the main thread itself does ``--prep-ms`` of numpy preprocessing per
batch inline (ON CPU, no CUDA call), as a loop that decodes/augments on the training thread does.
Fix: faster or relocated CPU code (vectorise, move to workers).

Both give about the same GPU idle time per step; only thread scheduling tells them apart:

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=process-tree --export sqlite \\
        -o blocked_input python3 workloads/host/input_wait.py --mode blocked

A profiler should conclude from ``SCHED_EVENTS``: blocked: the main thread is off CPU for most of
each ``data`` range (waiting on input, in a traced wait call or not); busy: it is on CPU for nearly
all of it (CPU work, host-bound, no CUDA call).

Prints (``[input_wait]`` lines) the wall time per step (mean, p50) and the mean time in ``data``.
"""

from __future__ import annotations

import os
import queue
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import loops


def main(argv: list[str] | None = None) -> int:
    p = loops.parser(__doc__, steps=30, warmup=3)
    p.add_argument("--mode", choices=("blocked", "busy"), default="blocked")
    p.add_argument("--prep-ms", type=float, default=10.0)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=2048)
    args = p.parse_args(argv)

    import common as cu
    import numpy as np
    import torch
    import torch.nn.functional as F

    dev, model, opt = loops.small_mlp(args.width)
    d = args.width
    rng = np.random.default_rng(0)
    raw = rng.standard_normal((args.batch, d), dtype=np.float32)
    labels = torch.randint(0, 10, (args.batch,), device=dev)
    work = np.empty_like(raw)

    def cpu_prep(ms: float) -> np.ndarray:
        """numpy preprocessing for about ``ms`` milliseconds (on CPU, no CUDA call)."""
        end = time.perf_counter() + ms / 1e3
        np.multiply(raw, 1.0, out=work)
        while time.perf_counter() < end:
            np.multiply(work, 0.999, out=work)
            np.add(work, 0.001, out=work)
        return work

    q: queue.Queue = queue.Queue(maxsize=2)
    stop = threading.Event()
    total = args.warmup + args.steps

    def producer() -> None:
        loops.name_thread("producer")
        for _ in range(total):
            if stop.is_set():
                return
            time.sleep(args.prep_ms * 0.9 / 1e3)  # waiting on a slow source
            b = raw * 1.0  # a little CPU work
            q.put(b)

    if args.mode == "blocked":
        threading.Thread(target=producer, daemon=True).start()

    data_ms: list[float] = []

    def step(timed: bool) -> float:
        t0 = time.perf_counter()
        with cu.nvtx_range("data"):
            b = q.get() if args.mode == "blocked" else cpu_prep(args.prep_ms)
        if timed:
            data_ms.append((time.perf_counter() - t0) * 1e3)
        x = torch.from_numpy(b).to(dev)
        loss = F.cross_entropy(model(x), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    ms, _ = loops.warm_then_time(lambda i, timed: step(timed), args.steps, args.warmup)
    stop.set()
    torch.cuda.synchronize()
    print(f"[input_wait] mode {args.mode}: {args.steps} steps (after {args.warmup} warm-up), input {args.prep_ms} ms "
          f"a batch ({'producer thread, queue.get' if args.mode == 'blocked' else 'numpy inline on the main thread'}); "
          f"{loops.mean_p50(ms)}; data mean "
          f"{statistics.mean(data_ms):.3f} ms", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
