"""A plain PyTorch training loop with no NVTX of its own, to record with ``nsysan profile --annotate``
(issue 53): an MLP on random data through a ``DataLoader``, AdamW (fused: one optimizer kernel a
step, the step boundary the fixture's SQL truth reads), ``loss.item()`` every step.

    nsysan profile --annotate -o annotate_plain -- python3 workloads/training/annotate/plain.py

Prints ``[train] annotate_plain: ... per step ...`` (wall clock between consecutive ``loss.item()``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=512)
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    x = torch.randn(args.steps * args.batch, 512)
    y = torch.randint(0, 10, (args.steps * args.batch,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=args.batch, pin_memory=True)
    model = torch.nn.Sequential(torch.nn.Linear(512, args.width), torch.nn.ReLU(),
                                *[m for _ in range(4) for m in (torch.nn.Linear(args.width, args.width), torch.nn.ReLU())],
                                torch.nn.Linear(args.width, 10)).to(dev)
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    times, t0 = [], None
    for xb, yb in loader:
        xb, yb = xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        last = loss.item()
        t1 = time.perf_counter()
        if t0 is not None:
            times.append(t1 - t0)
        t0 = t1
    torch.cuda.synchronize()
    steady = times[5:]
    print(f"[train] annotate_plain: {len(times) + 1} steps, batch {args.batch}, MLP width {args.width}, fused AdamW; "
          f"per step n={len(steady)} (after 5) p50 {statistics.median(steady) * 1e3:.3f} ms, "
          f"mean {statistics.mean(steady) * 1e3:.3f} ms; loss last {last:.4f}", flush=True)


if __name__ == "__main__":
    main()
