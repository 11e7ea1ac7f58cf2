"""A training loop blocked on its producer: who woke the waiting thread, and what the producer was doing.

Every ``train_step`` (NVTX range on the main thread) takes a batch in a ``data`` range, copies it to
the GPU, runs an MLP forward/backward/SGD step and reads the loss (``loss.item()``). The batches
come from ``--producers`` producers that each spend ``--prep-ms`` of CPU work per batch in
``make_batch`` (an NVTX range on the producer; numpy in ``decode`` then ``augment``, on CPU), so
with one producer the main thread waits in ``data`` for most of each step and the GPU idles.

``--mode queue``: producer threads (OS name ``producer<i>``) ``put`` into a ``queue.Queue(maxsize=2)``,
the main thread blocks in ``queue.get()`` (Python's lock wait: ``sem_wait``; the producer's
``sem_post`` is not traced). ``--mode event``: one slot per producer thread handed over with two
``threading.Event`` (``ready``/``taken``): the main thread blocks in ``ready.wait()`` (a Condition:
``sem_wait``). ``--mode pipe``: producer *processes* (multiprocessing, spawn) send each batch's index
and a 4 KiB header through a ``multiprocessing.Pipe``; the main thread blocks in ``recv()`` (a ``read``
on the pipe) and builds the batch from it.

The fix the trace should lead to: the producer's ``make_batch`` is the bottleneck (one batch per
``--prep-ms`` while the loop needs one per few ms): several producers, or a faster ``make_batch``.

    nsys profile -t cuda,nvtx,osrt --cpuctxsw=process-tree -s process-tree --python-sampling=true \\
        -o waits_producer python3 workloads/host/producer_wait.py --mode queue
    nsys export --type sqlite --include-blobs=true -o waits_producer.sqlite waits_producer.nsys-rep

``--measure 1,2,4`` runs the loop without the profiler with 1, 2 and 4 producers (in that order,
``--steps`` each after ``--warmup``) and prints the per-step time of each: the measured saving of
more producers.

Prints (``[producer_wait]`` lines) per step mean and p50, and the mean time in ``data``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import loops


def _nvtx():  # the producer's NVTX push/pop (nvtx package, else no-op: a spawned child has no torch)
    try:
        import nvtx

        return nvtx.push_range, nvtx.pop_range
    except ImportError:  # pragma: no cover
        return (lambda _n: None), (lambda: None)


class Maker:
    """One producer's batch preparation: ``prep_ms`` of numpy on CPU (decode ~70%, augment ~30%)."""

    def __init__(self, prep_ms: float, seed: int, rows: int = 512, cols: int = 512) -> None:
        import numpy as np

        self.np = np
        self.prep_s = prep_ms / 1e3
        self.raw = np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32)
        self.work = np.empty_like(self.raw)
        self.push, self.pop = _nvtx()

    def decode(self, until: float) -> None:
        np = self.np
        np.multiply(self.raw, 1.0, out=self.work)
        while time.perf_counter() < until:
            np.multiply(self.work, 0.999, out=self.work)
            np.add(self.work, 0.001, out=self.work)

    def augment(self, until: float) -> None:
        np = self.np
        while time.perf_counter() < until:
            np.sqrt(np.abs(self.work, out=self.work), out=self.work)

    def make_batch(self):
        self.push("make_batch")
        t0 = time.perf_counter()
        self.decode(t0 + 0.7 * self.prep_s)
        self.augment(t0 + self.prep_s)
        self.pop()
        return self.work.copy()


def _pipe_producer(conn, prep_ms: float, seed: int, count: int) -> None:  # a spawned process
    loops.name_thread(f"producer{seed}")
    m = Maker(prep_ms, seed)
    for i in range(count):
        b = m.make_batch()
        conn.send((i, b[:2].tobytes()))  # a small header: the main process builds the batch
    conn.close()


def run(args: argparse.Namespace, producers: int, quiet: bool = False) -> tuple[list[float], list[float]]:
    import common as cu
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn

    total = args.warmup + args.steps
    per = [total // producers + (1 if i < total % producers else 0) for i in range(producers)]
    get = _source(args.mode, producers, per, args.prep_ms)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.manual_seed(0)
    d = args.width
    model = nn.Sequential(nn.Linear(512, d), nn.GELU(), nn.Linear(d, d), nn.GELU(), nn.Linear(d, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    labels = torch.randint(0, 10, (args.batch,), device=dev)
    host = np.zeros((args.batch, 512), np.float32)
    data_ms: list[float] = []

    def step(timed: bool) -> float:
        t0 = time.perf_counter()
        with cu.nvtx_range("data"):
            b = get()
        if timed:
            data_ms.append((time.perf_counter() - t0) * 1e3)
        host[: len(b)] = b[: args.batch]
        x = torch.from_numpy(host).to(dev)
        loss = F.cross_entropy(model(x), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    with cu.nvtx_range("warmup"):
        for _ in range(args.warmup):
            step(False)
    dts = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        with cu.nvtx_range("train_step"):
            step(True)
        dts.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    if not quiet:
        print(f"[producer_wait] mode {args.mode}, {producers} producer(s), make_batch {args.prep_ms} ms: {args.steps} "
              f"steps (after {args.warmup} warm-up); per step mean {statistics.mean(dts):.3f} ms, p50 "
              f"{statistics.median(dts):.3f} ms; data mean {statistics.mean(data_ms):.3f} ms", file=sys.stderr, flush=True)
    return dts, data_ms


def _source(mode: str, producers: int, per: list[int], prep_ms: float):
    """Start the producers; return the main thread's blocking ``get()``."""
    if mode == "pipe":
        ctx = mp.get_context("spawn")
        conns = []
        for i in range(producers):
            a, b = ctx.Pipe(duplex=False)
            ctx.Process(target=_pipe_producer, args=(b, prep_ms, i, per[i]), daemon=True).start()
            conns.append(a)
        count = [0]

        def get_pipe():
            c = conns[count[0] % producers]
            count[0] += 1
            _, head = c.recv()
            import numpy as np

            return np.frombuffer(head, np.float32).reshape(2, -1)

        return get_pipe
    if mode == "queue":
        q: queue.Queue = queue.Queue(maxsize=2)

        def produce(i: int) -> None:
            loops.name_thread(f"producer{i}")
            m = Maker(prep_ms, i)
            for _ in range(per[i]):
                q.put(m.make_batch())

        for i in range(producers):
            threading.Thread(target=produce, args=(i,), daemon=True).start()
        return q.get
    # event: one slot per producer, handed over with two Events; taken round-robin
    slots: list[list] = [[None] for _ in range(producers)]
    ready = [threading.Event() for _ in range(producers)]
    taken = [threading.Event() for _ in range(producers)]

    def fill(i: int) -> None:
        loops.name_thread(f"producer{i}")
        m = Maker(prep_ms, i)
        for _ in range(per[i]):
            b = m.make_batch()
            taken[i].wait()
            taken[i].clear()
            slots[i][0] = b
            ready[i].set()

    for i in range(producers):
        taken[i].set()
        threading.Thread(target=fill, args=(i,), daemon=True).start()
    turn = [0]

    def get_event():
        i = turn[0] % producers
        turn[0] += 1
        ready[i].wait()
        ready[i].clear()
        b = slots[i][0]
        taken[i].set()
        return b

    return get_event


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("queue", "event", "pipe"), default="queue")
    p.add_argument("--producers", type=int, default=1)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--prep-ms", type=float, default=10.0)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--measure", default="", help="comma-separated producer counts: the loop without the profiler")
    args = p.parse_args(argv)
    if not args.measure:
        run(args, args.producers)
        return 0
    for n in [int(x) for x in args.measure.split(",")]:
        run(args, n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
