"""A small CNN training loop fed by a CPU input pipeline: inline on the training thread, or a DataLoader.

Each sample is "decoded" and augmented on the CPU with numpy (random crop, flip, 3x3 box blurs,
brightness/contrast jitter, normalization: ~50-100 us a sample, several ms a batch). Each training
step (NVTX range ``train_step``) copies the batch to the GPU, runs forward, backward and an SGD
step, and reads the loss (``loss.item()``: one synchronization per step, as a loop that logs its
loss does). The batch is fetched in an NVTX range ``data`` before each step.

* ``--loader inline`` (default): the batch is built on the training thread right before the
  step (the same dataset and collate function, no workers) and copied from pageable memory:
  the GPU idles while the CPU prepares the next batch;
* ``--loader dataloader``: the same dataset through ``torch.utils.data.DataLoader(num_workers=4,
  pin_memory=True)`` and ``non_blocking`` copies: the workers prepare batches while the GPU runs.

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --export sqlite -o train_inline \\
        python3 workloads/training/train.py --loader inline
    nsys profile ... -o train_dataloader python3 workloads/training/train.py --loader dataloader

It prints its own timings: wall time of each iteration (data + step; each step ends with the
loss read, so the clock sees the GPU's end), after ``--warmup`` untimed iterations (NVTX range
``warmup``): mean and p50 per iteration and steps/s, plus the mean time spent in ``data``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import common as cu
import numpy as np

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)


class SynthImages:
    """A map-style dataset of "encoded" uint8 images, decoded and augmented on the CPU per item."""

    def __init__(self, n: int, size: int = 64, pad: int = 8, blur_passes: int = 1, classes: int = 10) -> None:
        rng = np.random.default_rng(0)
        self.base = rng.integers(0, 256, (64, 3, size + pad, size + pad), dtype=np.uint8)
        self.n, self.size, self.blur_passes, self.classes = n, size, blur_passes, classes
        margin = 2 * blur_passes  # each 3x3 blur pass eats one pixel on every side
        assert pad >= margin
        self.offsets = rng.integers(0, pad - margin + 1, (n, 2))  # per-item augmentation parameters
        self.flip = rng.random(n) < 0.5
        self.gain = rng.uniform(0.8, 1.2, n).astype(np.float32)
        self.bias = rng.uniform(-0.1, 0.1, n).astype(np.float32)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import torch

        m = 2 * self.blur_passes
        y0, x0 = self.offsets[i]
        src = self.base[i % len(self.base)]
        img = src[:, y0:y0 + self.size + m, x0:x0 + self.size + m].astype(np.float32) * (1.0 / 255.0)
        if self.flip[i]:
            img = img[:, :, ::-1]
        for _ in range(self.blur_passes):  # separable 3x3 box blur over the valid region
            img = img[:, :-2, :] + img[:, 1:-1, :] + img[:, 2:, :]
            img = (img[:, :, :-2] + img[:, :, 1:-1] + img[:, :, 2:]) * (1.0 / 9.0)
        img = np.clip(img * self.gain[i] + self.bias[i], 0.0, 1.0)
        img = (img - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(img, dtype=np.float32)), i % self.classes


def make_model():
    from torch import nn

    def block(cin: int, cout: int, stride: int) -> list:
        return [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

    return nn.Sequential(*block(3, 64, 1), *block(64, 128, 2), *block(128, 128, 1), *block(128, 256, 2),
                         *block(256, 256, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loader", choices=["inline", "dataloader"], default="inline")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--blur-passes", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.warmup = 4, 2

    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, default_collate

    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    model = make_model().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    n_batches = args.steps + args.warmup
    ds = SynthImages(n_batches * args.batch, blur_passes=args.blur_passes)

    if args.loader == "dataloader":
        loader = DataLoader(ds, batch_size=args.batch, shuffle=False, drop_last=True, num_workers=args.workers,
                            pin_memory=True, prefetch_factor=2, persistent_workers=True)
        batches = iter(loader)
        non_blocking = True
    else:
        def inline():
            for b in range(n_batches):
                yield default_collate([ds[i] for i in range(b * args.batch, (b + 1) * args.batch)])
        batches = inline()
        non_blocking = False

    def one_step(x: torch.Tensor, y: torch.Tensor) -> float:
        x = x.to(dev, non_blocking=non_blocking).contiguous(memory_format=torch.channels_last)
        y = y.to(dev, non_blocking=non_blocking)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()  # one sync per step: the loss is logged

    with cu.nvtx_range("warmup"):
        for _ in range(args.warmup):
            x, y = next(batches)
            one_step(x, y)
    iter_s, data_s, losses = [], [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        with cu.nvtx_range("data"):
            x, y = next(batches)
        t1 = time.perf_counter()
        with cu.nvtx_range("train_step"):
            losses.append(one_step(x, y))
        t2 = time.perf_counter()
        iter_s.append(t2 - t0)
        data_s.append(t1 - t0)
    torch.cuda.synchronize()
    ms = [s * 1e3 for s in iter_s]
    print(f"[train] {args.loader}: {args.steps} steps (after {args.warmup} warm-up), batch {args.batch} x 3x64x64, "
          f"CNN 5 conv, bf16 autocast, workers {args.workers if args.loader == 'dataloader' else 0}", file=sys.stderr)
    print(f"[train] {args.loader}: per iteration (data + step, wall clock) mean {statistics.mean(ms):.3f} ms, "
          f"p50 {statistics.median(ms):.3f} ms; steps/s {args.steps / sum(iter_s):.1f}; data wait mean "
          f"{statistics.mean(data_s) * 1e3:.3f} ms; loss first {losses[0]:.4f} last {losses[-1]:.4f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
