"""A plain PyTorch training loop with no NVTX range of its own (issue 48: traces nobody annotated).

``--mode shapes``: a small transformer encoder trained on random tokens whose sequence length is drawn
per step from {64, 96, 128} (seeded), so the kernels' launch configurations vary from step to step
while their names mostly stay the same. ``--mode validation``: the same loop with a validation pass
(``model.eval()``, ``torch.no_grad()``, 5 batches) every 10 steps. Fused Adam: one fused Adam kernel
per optimizer step. ``loss.item()`` only every 10 steps, so the CPU may run ahead of the GPU; the
per-step time is measured with CUDA events recorded at each step boundary (read once, after the
loop's final synchronize) and checked against the synchronized wall time of the whole loop.

    python3 workloads/training/unannotated/varying_steps.py --mode shapes
    python3 workloads/training/unannotated/varying_steps.py --mode validation
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

TAG = "[varying_steps]"
VOCAB, D, HEADS, LAYERS, BATCH = 4096, 256, 4, 2, 32
LENGTHS = (64, 96, 128)


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        layer = nn.TransformerEncoderLayer(D, HEADS, dim_feedforward=4 * D, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, tok):
        return self.head(self.enc(self.emb(tok)))


def batch(rng: random.Random, dev, length: int | None = None):
    n = length or rng.choice(LENGTHS)
    tok = torch.randint(0, VOCAB, (BATCH, n + 1), device=dev)
    return tok[:, :-1], tok[:, 1:], n


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("shapes", "validation"), default="shapes")
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    torch.manual_seed(0)
    rng = random.Random(0)
    dev = torch.device("cuda")
    model = TinyLM().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4, fused=True)

    def train_step(step: int):
        x, y, n = batch(rng, dev)
        loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss, n

    def validate():
        model.eval()
        tot = torch.zeros((), device=dev)
        with torch.no_grad():
            for _ in range(5):
                x, y, _ = batch(rng, dev)
                tot += F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        model.train()
        return tot / 5

    for i in range(a.warmup):  # warm-up: cuBLAS handles, allocator, each length once
        train_step(-1 - i)
    torch.cuda.synchronize()

    losses, vals, lengths = [], [], []
    events = [torch.cuda.Event(enable_timing=True) for _ in range(a.steps + 1)]
    t0 = time.perf_counter()
    events[0].record()
    for step in range(a.steps):
        loss, n = train_step(step)
        lengths.append(n)
        if step % 10 == 0:
            losses.append(loss.item())
        if a.mode == "validation" and step % 10 == 9:
            vals.append(validate())
        events[step + 1].record()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) * 1e3
    per = [events[i].elapsed_time(events[i + 1]) for i in range(a.steps)]
    by_len = {n: statistics.median([t for t, m in zip(per, lengths) if m == n]) for n in sorted(set(lengths))}
    print(f"{TAG} mode {a.mode}: {a.steps} steps (after {a.warmup} warm-up), batch {BATCH}, seq len per step from "
          f"{LENGTHS} (counts {', '.join(f'{n}: {lengths.count(n)}' for n in sorted(set(lengths)))}), "
          f"transformer d={D} x{LAYERS} layers, fused Adam"
          + (f"; validation (eval, no_grad, 5 batches) after every 10th step: {len(vals)} passes" if vals else ""),
          flush=True)
    print(f"{TAG} mode {a.mode}: per step (CUDA events at step boundaries) mean {statistics.fmean(per):.3f} ms, "
          f"p50 {statistics.median(per):.3f} ms, n={len(per)}; synchronized wall {wall:.1f} ms = "
          f"{wall / a.steps:.3f} ms/step; p50 by length "
          + ", ".join(f"{n}: {t:.3f} ms" for n, t in by_len.items())
          + f"; loss first {losses[0]:.4f} last {losses[-1]:.4f}"
          + (f"; val loss last {vals[-1].item():.4f}" if vals else ""), flush=True)
    if vals:
        steps_v = [per[i] for i in range(9, a.steps, 10)]
        other = [per[i] for i in range(a.steps) if i % 10 != 9]
        print(f"{TAG} mode {a.mode}: p50 of steps with a validation pass {statistics.median(steps_v):.3f} ms, "
              f"others {statistics.median(other):.3f} ms", flush=True)


if __name__ == "__main__":
    main()
