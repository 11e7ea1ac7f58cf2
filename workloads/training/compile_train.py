"""A small GPT-style language model trained with ``torch.compile(mode="reduce-overhead")``.

The model (token + position embeddings, ``--layers`` pre-norm blocks with causal
``scaled_dot_product_attention`` and a GELU MLP, an output head) and its loss are compiled by
TorchInductor in "reduce-overhead" mode: forward and backward each run as CUDA graphs replayed
through CUDA graph trees (``torch.compiler.cudagraph_mark_step_begin()`` starts each step).
The AdamW update stays eager (``foreach``). bf16 autocast.

Every step, warm-up included, is one NVTX range ``train_step``: mark the step, forward + loss
(compiled), backward (compiled), ``opt.step()``, ``zero_grad``, and ``loss.item()`` (one
synchronization per step, as a loop that logs its loss does). The first step compiles (Dynamo,
AOTAutograd, Inductor, Triton), so it is one long early step; the next ones warm up and record
the CUDA graphs; then the graphs are replayed.

``TORCHINDUCTOR_COMPILE_THREADS=1`` is set (unless already set) so that Inductor compiles in this
process rather than a pool of worker processes: the trace holds one process.

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --export sqlite -o compile_train \\
        python3 workloads/training/compile_train.py

It prints its own timings: the wall time of each step (the clock stops after ``loss.item()``): the
first (compile) step and each warm-up step, then for the ``--steps`` timed steps mean, p50, min,
max and steps/s, plus the first and last loss.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

try:
    import nvtx as _nvtx

    def push(name: str) -> None:
        _nvtx.push_range(name)

    def pop() -> None:
        _nvtx.pop_range()

except ImportError:  # fall back to torch's NVTX bindings
    def push(name: str) -> None:
        import torch

        torch.cuda.nvtx.range_push(name)

    def pop() -> None:
        import torch

        torch.cuda.nvtx.range_pop()


def make_model(vocab: int, seq: int, d: int, layers: int, heads: int):
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(a)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.lnf, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            """Mean next-token cross-entropy of a (batch, seq + 1) token tensor."""
            inp, tgt = tokens[:, :-1], tokens[:, 1:]
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=inp.is_cuda):
                x = self.emb(inp) + self.pos.weight[: inp.shape[1]]
                for blk in self.blocks:
                    x = blk(x)
                logits = self.head(self.lnf(x))
            return F.cross_entropy(logits.float().flatten(0, 1), tgt.flatten())

    return LM()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--mode", default="reduce-overhead")
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.layers, args.dim, args.heads, args.seq = 4, 3, 2, 256, 4, 64

    import torch

    torch.manual_seed(0)
    dev = torch.device(args.device)
    model = make_model(args.vocab, args.seq, args.dim, args.layers, args.heads).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, foreach=True)
    cmodel = torch.compile(model, mode=args.mode)
    n_params = sum(q.numel() for q in model.parameters())

    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(8):  # learnable sequences: each row an arithmetic progression modulo the vocabulary
        start = torch.randint(0, args.vocab, (args.batch, 1), generator=g)
        stride = torch.randint(1, 8, (args.batch, 1), generator=g)
        batches.append(((start + stride * torch.arange(args.seq + 1)) % args.vocab).to(dev))

    def one_step(tokens: torch.Tensor) -> float:
        torch.compiler.cudagraph_mark_step_begin()
        loss = cmodel(tokens)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    step_s, losses = [], []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        push("train_step")
        try:
            losses.append(one_step(batches[i % len(batches)]))
        finally:
            pop()
        step_s.append(time.perf_counter() - t0)
    if dev.type == "cuda":
        torch.cuda.synchronize()

    warm = [s * 1e3 for s in step_s[: args.warmup]]
    ms = [s * 1e3 for s in step_s[args.warmup:]]
    print(f"[train] compile_train: torch {torch.__version__} on {torch.cuda.get_device_name() if dev.type == 'cuda' else dev}"
          f"; torch.compile(mode={args.mode!r}), {args.warmup} warm-up + {args.steps} timed steps, all in NVTX "
          f"train_step; batch {args.batch} x {args.seq} tokens, GPT {args.layers} layers d {args.dim} heads "
          f"{args.heads} vocab {args.vocab} ({n_params / 1e6:.1f} M params), bf16 autocast, AdamW foreach; "
          f"TORCHINDUCTOR_COMPILE_THREADS={os.environ.get('TORCHINDUCTOR_COMPILE_THREADS')}", file=sys.stderr)
    print("[train] compile_train: warm-up steps (wall clock, first one compiles): "
          + ", ".join(f"{w:.1f} ms" for w in warm), file=sys.stderr)
    print(f"[train] compile_train: per timed step (wall clock, ends with loss.item()) n={len(ms)} mean "
          f"{statistics.mean(ms):.3f} ms, p50 {statistics.median(ms):.3f} ms, min {min(ms):.3f} ms, max "
          f"{max(ms):.3f} ms; steps/s {args.steps / sum(step_s[args.warmup:]):.1f}; tokens/s "
          f"{args.batch * args.seq * args.steps / sum(step_s[args.warmup:]):.0f}; loss first {losses[0]:.4f} "
          f"last {losses[-1]:.4f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
