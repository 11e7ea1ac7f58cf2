"""A single-GPU serving loop: host-side request handling around an eager small-kernel model.

Every request (NVTX range ``request``) is handled on the one serving thread:

* ``prepare`` (host, ~``--prepare-ms``): "tokenise" the request's text with numpy (byte codes,
  rolling bigram hashes, a vocabulary lookup), repeated over the request's documents;
* ``schedule`` (host, ~``--schedule-ms``): pure-Python batching work (sort the pending queue by
  priority and length, pad lengths, build position lists);
* ``--tokens`` decode tokens, each an NVTX range ``token`` holding ``forward`` (an eager bf16
  model of ``--layers`` blocks, ~27 small kernels a block, launched one by one from Python) and
  the greedy pick of the next token, read back with ``.item()`` (one synchronization a token, as
  a server streaming tokens to its client does).

The GPU idles while the host prepares and schedules a request, and between kernels of ``forward``
(the host's launch rate bounds it). The first ``--warmup`` requests run in a ``warmup`` range.

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --osrt-threshold=10000 --export sqlite \\
        -o serve_loop python3 workloads/inference/serve_loop.py

It prints its own timings (``[serve_loop]`` lines): wall time per request (it ends with the last
token's read, so the clock sees the GPU's end), and means per request of ``prepare``, ``schedule``,
the host time of ``forward`` (launching its kernels) and the GPU-stream time of ``forward`` (CUDA
events around it, read after the request).
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

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hex jumbled "
         "boxes of pizza near the frozen lake and every zebra waits").split()


def tokenise(text: str, vocab: int) -> np.ndarray:
    """Byte codes -> rolling bigram hashes -> ids (numpy busy work of a tokenizer's size)."""
    b = np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int64)
    h = (b[:-1] * 257 + b[1:]) * 2654435761 % (1 << 31)
    uniq, inv = np.unique(h, return_inverse=True)
    ids = (uniq * 40503 % vocab)[inv]
    return np.cumsum(ids % 7) + ids


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--tokens", type=int, default=4, help="decode tokens per request")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=10)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--prepare-ms", type=float, default=4.0)
    p.add_argument("--schedule-ms", type=float, default=2.0)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.warmup = 3, 1

    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    H, V, B = args.hidden, args.vocab, args.batch

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, device=dev) * shape[-1] ** -0.5).to(dt)

    emb = w(V, H)
    blocks = [{"n1": torch.ones(H, device=dev, dtype=dt), "n2": torch.ones(H, device=dev, dtype=dt),
               "wa": w(H, H), "wb": w(H, H), "wg": w(2 * H, H), "wu": w(2 * H, H), "wd": w(H, 2 * H)}
              for _ in range(args.layers)]
    nf = torch.ones(H, device=dev, dtype=dt)

    def rms(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * g

    def forward(tok: torch.Tensor) -> torch.Tensor:
        x = emb[tok]
        for blk in blocks:
            h = rms(x, blk["n1"])
            x = x + F.linear(F.gelu(F.linear(h, blk["wa"])), blk["wb"]) * 0.5
            h = rms(x, blk["n2"])
            x = x + F.linear(F.silu(F.linear(h, blk["wg"])) * F.linear(h, blk["wu"]), blk["wd"])
        return F.linear(rms(x, nf), emb)

    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, 400)) for _ in range(16)]
    queue = [{"id": i, "prio": int(rng.integers(0, 4)), "len": int(rng.integers(8, 512))} for i in range(256)]

    def prepare(r: int) -> np.ndarray:
        t_end = time.perf_counter() + args.prepare_ms / 1e3
        j = 0
        while True:  # at least once
            ids = tokenise(texts[(r + j) % len(texts)], V)
            j += 1
            if time.perf_counter() >= t_end:
                break
        return ids % V

    def schedule(r: int) -> list[int]:
        t_end = time.perf_counter() + args.schedule_ms / 1e3
        while True:  # at least once
            order = sorted(queue, key=lambda q: (q["prio"], -q["len"], (q["id"] * 31 + r) % 97))
            longest = max(q["len"] for q in order[:B])
            pads = [longest - q["len"] for q in order[:B]]
            positions = [list(range(q["len"])) for q in order[:B]]
            picked = [q["id"] + pads[i] + len(positions[i]) for i, q in enumerate(order[:B])]
            if time.perf_counter() >= t_end:
                break
        return picked

    stats: dict[str, list[float]] = {k: [] for k in ("request", "prepare", "schedule", "fwd_host", "fwd_gpu", "token")}

    def request(r: int, timed: bool) -> int:
        t0 = time.perf_counter()
        with cu.nvtx_range("prepare"):
            ids = prepare(r)
        t1 = time.perf_counter()
        with cu.nvtx_range("schedule"):
            picked = schedule(r)
        t2 = time.perf_counter()
        tok = torch.tensor([int(ids[(i * 13 + p) % len(ids)]) for i, p in enumerate(picked)], device=dev)
        checksum, fwd_host, evs = 0, 0.0, []
        for _ in range(args.tokens):
            ts = time.perf_counter()
            with cu.nvtx_range("token"):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                tf = time.perf_counter()
                with cu.nvtx_range("forward"):
                    logits = forward(tok)
                fwd_host += time.perf_counter() - tf
                e1.record()
                evs.append((e0, e1))
                tok = logits.argmax(-1)
                checksum += int(tok.sum().item())
            if timed:
                stats["token"].append(time.perf_counter() - ts)
        if timed:
            stats["request"].append(time.perf_counter() - t0)
            stats["prepare"].append(t1 - t0)
            stats["schedule"].append(t2 - t1)
            stats["fwd_host"].append(fwd_host / args.tokens)
            stats["fwd_gpu"].append(statistics.mean(a.elapsed_time(b) for a, b in evs) / 1e3)
        return checksum

    with cu.nvtx_range("warmup"):
        for r in range(args.warmup):
            request(r, False)
    torch.cuda.synchronize()
    total = 0
    for r in range(args.requests):
        with cu.nvtx_range("request"):
            total += request(r, True)
    torch.cuda.synchronize()
    m = {k: [x * 1e3 for x in v] for k, v in stats.items()}
    print(f"[serve_loop] {args.requests} requests (after {args.warmup} warm-up) x {args.tokens} tokens, batch {B}, "
          f"{args.layers} blocks hidden {H}, bf16 eager: per request mean {statistics.mean(m['request']):.3f} ms, "
          f"p50 {statistics.median(m['request']):.3f} ms; per token mean {statistics.mean(m['token']):.3f} ms, "
          f"p50 {statistics.median(m['token']):.3f} ms", file=sys.stderr, flush=True)
    host = statistics.mean(m["prepare"]) + statistics.mean(m["schedule"])
    print(f"[serve_loop] per request: prepare mean {statistics.mean(m['prepare']):.3f} ms "
          f"({100 * statistics.mean(m['prepare']) / host:.0f}% of prepare+schedule), schedule mean "
          f"{statistics.mean(m['schedule']):.3f} ms ({100 * statistics.mean(m['schedule']) / host:.0f}%); per token: "
          f"forward host (launch) mean {statistics.mean(m['fwd_host']):.3f} ms, forward GPU stream (CUDA events) "
          f"mean {statistics.mean(m['fwd_gpu']):.3f} ms; token checksum {total}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
