"""A PyTorch Lightning ``Trainer.fit`` whose input pipeline does real CPU decoding work, with no NVTX
range of its own (issue 48: traces nobody annotated).

``Dataset.__getitem__`` "decodes" a sample with numpy (a seeded uint8 image, a few FFT filter passes,
a normalisation: ~1-2 ms per sample), so with ``--workers 0`` the training thread spends most of each
step in the input pipeline; ``--workers 4`` moves it to DataLoader worker processes (persistent,
pinned memory). The model is a small CNN on the GPU trained with fused Adam (one ``fused_adam``-style
kernel per optimizer step). ``loss.item()`` only every 10 steps.

    python3 workloads/training/unannotated/lightning_input.py --workers 0
    python3 workloads/training/unannotated/lightning_input.py --workers 4
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl

TAG = "[lightning_input]"


class DecodeDataset(torch.utils.data.Dataset):
    def __init__(self, n: int, size: int = 64, passes: int = 3):
        self.n, self.size, self.passes = n, size, passes
        fy = np.fft.fftfreq(size)[:, None]
        fx = np.fft.rfftfreq(size)[None, :]
        self.mask = np.exp(-(fy ** 2 + fx ** 2) * 40.0).astype(np.float32)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int):
        rng = np.random.default_rng(idx)
        raw = rng.integers(0, 256, size=(3, self.size, self.size), dtype=np.uint8)  # the "encoded" sample
        x = raw.astype(np.float32) / 255.0
        for _ in range(self.passes):  # "decode": a few frequency-domain filter passes
            x = np.fft.irfft2(np.fft.rfft2(x) * self.mask, s=(self.size, self.size)).astype(np.float32)
            x = np.tanh(x * 2.0 - 1.0)
        x = (x - x.mean(axis=(1, 2), keepdims=True)) / (x.std(axis=(1, 2), keepdims=True) + 1e-5)
        label = int(raw[0, 0, 0]) % 10
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), label


class SmallCNN(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(64, 10))
        self.losses: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        if batch_idx % 10 == 0:
            self.losses.append(loss.item())  # the only host sync of the loop, every 10 steps
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3, fused=True)


class StepTimes(pl.Callback):
    def __init__(self):
        self.ends: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.ends.append(time.perf_counter())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--passes", type=int, default=3)
    a = p.parse_args()

    ds = DecodeDataset(a.steps * a.batch, passes=a.passes)
    t0 = time.perf_counter()
    for i in range(64):
        ds[10**6 + i]
    per_sample_ms = (time.perf_counter() - t0) / 64 * 1e3

    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=False, num_workers=a.workers,
                                     persistent_workers=a.workers > 0, pin_memory=True, drop_last=True)
    model = SmallCNN()
    cb = StepTimes()
    trainer = pl.Trainer(accelerator="gpu", devices=1, max_epochs=1, max_steps=a.steps,
                         enable_progress_bar=False, logger=False, enable_checkpointing=False,
                         enable_model_summary=False, callbacks=[cb])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    trainer.fit(model, dl)
    torch.cuda.synchronize()
    fit_s = time.perf_counter() - t0

    steps = len(cb.ends)
    d = [(b - a_) * 1e3 for a_, b in zip(cb.ends[10:], cb.ends[11:])]
    mean = statistics.fmean(d) if d else float("nan")
    p50 = statistics.median(d) if d else float("nan")
    print(f"{TAG} workers {a.workers}: {steps} steps, batch {a.batch} x 3x64x64, decode {per_sample_ms:.3f} ms/sample "
          f"(main process, {a.passes} passes); small CNN, fused Adam", flush=True)
    print(f"{TAG} workers {a.workers}: fit wall {fit_s * 1e3:.1f} ms; per step (after the first 10, on_train_batch_end "
          f"to on_train_batch_end) mean {mean:.3f} ms, p50 {p50:.3f} ms, n={len(d)}; "
          f"loss first {model.losses[0]:.4f} last {model.losses[-1]:.4f}", flush=True)


if __name__ == "__main__":
    main()
