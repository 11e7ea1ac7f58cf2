"""The inference optimization ladder (ResNet-18, batches of 128 at 224x224), one step per situation.

Each step adds one fix to the one before it, as in the seed article
(TensorRT ResNet-18, V100: 133.6 ms -> ~25 ms for 3 batches of 128):

  baseline   device buffers cudaMalloc'd/cudaFree'd per batch, pageable host memory,
             synchronous cudaMemcpy, results printed inline on the submitting thread
  reuse      device buffers allocated once and reused
  pinned     pinned host memory (cudaHostAlloc), cudaMemcpyAsync + stream synchronize
  fp16       FP16 precision (TensorRT builder flag; model.half() on PyTorch)
  overlap    copy stream + compute stream + events, the next batch's H2D copy prefetched
             while the current batch computes (double-buffered device inputs)
  worker     result processing ("Print Result") moved to a worker thread
  graph      the inference captured once as a CUDA Graph and replayed per batch
  multictx   two execution contexts on two CPU threads, batches dealt round-robin
  profiles   two optimization profiles (batch 128 and batch 64): each batch is split in two
             halves of 64 run concurrently by the two contexts, each on the batch-64 profile

NVTX: "setup" (buffers, data), "build engine", "infer" per batch, "Print Result" per batch,
"Total Elapsed Time(3 batches)" around the last ``--timed`` batches (the timed region).

Run under Nsight Systems (see ``workloads/recorder.py`` or ``nsysan profile``):

    nsys profile -t cuda,nvtx,osrt -s none --export sqlite -o ladder_baseline \\
        python3 workloads/ladder/ladder.py --step baseline

Expected findings (nsysan): baseline -> alloc-in-loop, pageable-memcpy, sync-memcpy, host-bound-gap;
pinned -> serial-copy-compute, fp32-compute; overlap -> host-bound-gap (Print Result);
worker -> launch-bound (many small kernels between copies); graph -> graphs recognised.
``--quick`` runs 4 batches of 32 for a smoke test.
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import common as cu
import numpy as np
from backends import IMAGE_SHAPE, NUM_CLASSES, make_engine

STEPS = ["baseline", "reuse", "pinned", "fp16", "overlap", "worker", "graph", "multictx", "profiles"]


@dataclass(frozen=True)
class Config:
    step: str
    backend: str
    batch: int
    batches: int
    timed: int
    print_top: int

    def at_least(self, step: str) -> bool:
        return STEPS.index(self.step) >= STEPS.index(step)


def print_result(batch_index: int, logits: np.ndarray, top: int, out: Any = sys.stdout) -> None:
    """Softmax + top-k per image, printed line by line (the seed's result handling)."""
    with cu.nvtx_range("Print Result"):
        shifted = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(shifted)
        probs /= probs.sum(axis=1, keepdims=True)
        best = np.argsort(-probs, axis=1)[:, :top]
        for i in range(logits.shape[0]):
            classes = " ".join(f"{c}:{probs[i, c]:.4f}" for c in best[i])
            print(f"batch {batch_index} image {i}: {classes}", file=out)


@dataclass
class Pipeline:
    """One execution context's state: streams, events, device and host buffers."""

    cfg: Config
    context: Any
    inputs: list[cu.HostBuffer]
    rows: slice  # which images of each batch this context handles
    results: queue.Queue[tuple[int, np.ndarray] | None] | None = None
    copy_stream: Any = None
    compute_stream: Any = None
    d_in: list[cu.DeviceArray] = field(default_factory=list)
    d_out: list[cu.DeviceArray] = field(default_factory=list)
    h_out: list[cu.HostBuffer] = field(default_factory=list)
    ev_copied: list[Any] = field(default_factory=list)
    ev_consumed: list[Any] = field(default_factory=list)
    graphs: list[Any] = field(default_factory=list)

    @property
    def n(self) -> int:
        return self.rows.stop - self.rows.start

    def setup(self) -> None:
        cfg = self.cfg
        slots = 2 if cfg.at_least("overlap") else 1
        if cfg.at_least("pinned"):
            self.copy_stream = cu.stream_create()
            self.compute_stream = cu.stream_create() if cfg.at_least("overlap") else self.copy_stream
        if cfg.at_least("reuse"):
            self.d_in = [cu.DeviceArray((self.n, *IMAGE_SHAPE), np.float32) for _ in range(slots)]
            self.d_out = [cu.DeviceArray((self.n, NUM_CLASSES), np.float32) for _ in range(slots)]
        alloc = cu.HostBuffer.pinned_alloc if cfg.at_least("pinned") else cu.HostBuffer.pageable
        self.h_out = [alloc((self.n, NUM_CLASSES), np.float32) for _ in range(slots)]
        if cfg.at_least("overlap"):
            self.ev_copied = [cu.event_create() for _ in range(slots)]
            self.ev_consumed = [cu.event_create() for _ in range(slots)]
            for ev in self.ev_consumed:  # buffers start free
                cu.event_record(ev, self.compute_stream)
        if cfg.at_least("graph"):
            with cu.nvtx_range("capture graph"):
                self.graphs = [
                    self.context.capture(self.d_in[s], self.d_out[s], self.compute_stream, self.n) for s in range(slots)
                ]
            cu.device_sync()

    def host_input(self, index: int) -> tuple[int, int]:
        buf = self.inputs[index % len(self.inputs)]
        row_bytes = buf.nbytes // buf.array.shape[0]
        return buf.ptr + self.rows.start * row_bytes, self.n * row_bytes

    # -- simple steps: baseline, reuse, pinned, fp16 ------------------------------------------
    def run_serial(self, index: int) -> None:
        cfg = self.cfg
        src, nbytes = self.host_input(index)
        with cu.nvtx_range("infer"):
            if cfg.at_least("reuse"):
                d_in, d_out = self.d_in[0], self.d_out[0]
            else:
                d_in = cu.DeviceArray((self.n, *IMAGE_SHAPE), np.float32)
                d_out = cu.DeviceArray((self.n, NUM_CLASSES), np.float32)
            h_out = self.h_out[0]
            if cfg.at_least("pinned"):
                stream = self.compute_stream
                cu.memcpy_async(d_in.ptr, src, nbytes, cu.H2D, stream)
                self.context.enqueue(d_in, d_out, stream, self.n)
                cu.memcpy_async(h_out.ptr, d_out.ptr, h_out.nbytes, cu.D2H, stream)
                cu.stream_sync(stream)
            else:
                cu.memcpy(d_in.ptr, src, nbytes, cu.H2D)
                self.context.enqueue(d_in, d_out, None, self.n)
                cu.memcpy(h_out.ptr, d_out.ptr, h_out.nbytes, cu.D2H)
            if not cfg.at_least("reuse"):
                d_in.free()
                d_out.free()
        self.handle(index, h_out.array)

    # -- overlapped steps: overlap and later ---------------------------------------------------
    def issue_copy(self, index: int) -> None:
        slot = index % 2
        src, nbytes = self.host_input(index)
        cu.stream_wait(self.copy_stream, self.ev_consumed[slot])  # input buffer free again
        cu.memcpy_async(self.d_in[slot].ptr, src, nbytes, cu.H2D, self.copy_stream)
        cu.event_record(self.ev_copied[slot], self.copy_stream)

    def run_overlapped(self, indices: list[int]) -> None:
        if not indices:
            return
        self.issue_copy(indices[0])
        for k, index in enumerate(indices):
            slot = index % 2
            with cu.nvtx_range("infer"):
                cu.stream_wait(self.compute_stream, self.ev_copied[slot])
                if self.graphs:
                    self.graphs[slot]()
                else:
                    self.context.enqueue(self.d_in[slot], self.d_out[slot], self.compute_stream, self.n)
                cu.event_record(self.ev_consumed[slot], self.compute_stream)
                if k + 1 < len(indices):
                    self.issue_copy(indices[k + 1])  # prefetch the next batch during compute
                h_out = self.h_out[slot]
                cu.memcpy_async(h_out.ptr, self.d_out[slot].ptr, h_out.nbytes, cu.D2H, self.compute_stream)
                cu.stream_sync(self.compute_stream)
            self.handle(index, h_out.array)

    def handle(self, index: int, logits: np.ndarray) -> None:
        if self.results is not None:
            self.results.put((index, logits.copy()))
        else:
            print_result(index, logits, self.cfg.print_top)

    def run(self, indices: list[int]) -> None:
        if self.cfg.at_least("overlap"):
            self.run_overlapped(indices)
        else:
            for index in indices:
                self.run_serial(index)


def result_worker(results: queue.Queue[tuple[int, np.ndarray] | None], top: int) -> None:
    while (item := results.get()) is not None:
        print_result(item[0], item[1], top)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--step", choices=STEPS, default="baseline")
    p.add_argument("--backend", choices=["auto", "tensorrt", "torch"], default="auto")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--timed", type=int, default=3, help="the last N batches are timed")
    p.add_argument("--top", type=int, default=5, help="classes printed per image")
    p.add_argument("--quick", action="store_true", help="4 batches of 32 (smoke test)")
    args = p.parse_args(argv)
    if args.quick:
        args.batch, args.batches, args.timed = 32, 4, 2
    cfg = Config(args.step, args.backend, args.batch, args.batches, min(args.timed, args.batches), args.top)

    n_ctx = 2 if cfg.at_least("multictx") else 1
    split = cfg.step == "profiles"
    half = cfg.batch // 2
    profiles = [cfg.batch, half] if split else [cfg.batch]
    engine = make_engine(cfg.backend, fp16=cfg.at_least("fp16"), profiles=profiles)

    with cu.nvtx_range("setup"):
        rng = np.random.default_rng(0)
        alloc = cu.HostBuffer.pinned_alloc if cfg.at_least("pinned") else cu.HostBuffer.pageable
        inputs = []
        for _ in range(min(cfg.batches, 3)):  # the "dataset" already in host memory
            buf = alloc((cfg.batch, *IMAGE_SHAPE), np.float32)
            buf.array[...] = rng.standard_normal(buf.array.shape, dtype=np.float32)
            inputs.append(buf)
        results: queue.Queue[tuple[int, np.ndarray] | None] | None = (
            queue.Queue() if cfg.at_least("worker") else None
        )
        pipes = []
        for c in range(n_ctx):
            rows = slice(c * half, (c + 1) * half) if split else slice(0, cfg.batch)
            ctx = engine.create_context(1 if split else 0)
            pipe = Pipeline(cfg, ctx, inputs, rows, results)
            pipe.setup()
            pipes.append(pipe)
        worker = None
        if results is not None:
            worker = threading.Thread(target=result_worker, args=(results, cfg.print_top), name="result-worker")
            worker.start()

    def run_phase(indices: list[int]) -> None:
        if n_ctx == 1:
            pipes[0].run(indices)
            return
        if split:  # both contexts work on every batch, each on its half
            jobs = [indices, indices]
        else:  # batches dealt round-robin to the contexts
            jobs = [indices[c::n_ctx] for c in range(n_ctx)]
        threads = [threading.Thread(target=pipe.run, args=(job,), name=f"context-{c}") for c, (pipe, job) in
                   enumerate(zip(pipes, jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    first_timed = cfg.batches - cfg.timed
    run_phase(list(range(first_timed)))  # warm-up batches, untimed
    cu.device_sync()
    label = f"Total Elapsed Time({cfg.timed} batches)"
    with cu.nvtx_range(label):
        t0 = time.perf_counter()
        run_phase(list(range(first_timed, cfg.batches)))
        cu.device_sync()
        if results is not None:  # results must be handled before the clock stops
            results.put(None)
            assert worker is not None
            worker.join()
        elapsed = time.perf_counter() - t0
    print(
        f"[ladder] backend={engine.name} step={cfg.step} batch={cfg.batch} "
        f"{label}: {elapsed * 1e3:.3f} ms per-batch: {elapsed * 1e3 / cfg.timed:.3f} ms",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
