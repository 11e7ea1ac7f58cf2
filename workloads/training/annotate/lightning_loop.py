"""A Lightning training loop with no NVTX of its own, to record with ``nsysan profile --annotate``
(issue 53): an MLP LightningModule on random data, AdamW (fused), one epoch of ``--steps`` batches,
then 4 validation batches (and Lightning's 2 sanity-check batches before training).

    nsysan profile --annotate -o annotate_lightning -- python3 workloads/training/annotate/lightning_loop.py

Prints ``[train] annotate_lightning: ... per step ...`` (wall clock between consecutive
``on_train_batch_end`` calls).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

try:
    import lightning as L
except ImportError:  # the older package name
    import pytorch_lightning as L


class MLP(L.LightningModule):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(512, width), torch.nn.ReLU(),
                                       *[m for _ in range(4) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())],
                                       torch.nn.Linear(width, 10))
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.times: list[float] = []
        self.t0: float | None = None

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, _i):
        x, y = batch
        return self.loss_fn(self(x), y)

    def validation_step(self, batch, _i):
        x, y = batch
        return self.loss_fn(self(x), y)

    def on_train_batch_end(self, *_a) -> None:
        t1 = time.perf_counter()
        if self.t0 is not None:
            self.times.append(t1 - self.t0)
        self.t0 = t1

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3, fused=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=512)
    args = ap.parse_args()
    torch.manual_seed(0)

    def data(n: int):
        ds = torch.utils.data.TensorDataset(torch.randn(n * args.batch, 512), torch.randint(0, 10, (n * args.batch,)))
        return torch.utils.data.DataLoader(ds, batch_size=args.batch, pin_memory=True)

    model = MLP(args.width)
    trainer = L.Trainer(max_epochs=1, accelerator="gpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=2)
    trainer.fit(model, data(args.steps), data(4))
    steady = model.times[5:]
    print(f"[train] annotate_lightning: lightning {L.__version__}, {len(model.times) + 1} steps, batch {args.batch}, "
          f"MLP width {args.width}, fused AdamW; per step n={len(steady)} (after 5) p50 "
          f"{statistics.median(steady) * 1e3:.3f} ms, mean {statistics.mean(steady) * 1e3:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
