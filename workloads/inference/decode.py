"""LLM-style token-by-token decode: a small plain-PyTorch transformer decoder with a static KV cache.

Several "requests" (NVTX range ``request``) each generate ``--tokens`` tokens greedily, one NVTX
range ``decode_token`` per step. The CPU never synchronizes inside a request: it queues every token
step and waits only at the end of the request. The position lives in a device tensor, so a token
step reads it, writes the new K/V at that position, attends over the whole static cache with a
mask, picks the next token with argmax, stores it and increments the position, all on the GPU.

* eager (default): each token step is ~20 small kernels per layer launched from Python: the CPU's
  launch rate bounds the decode (the GPU idles between kernels);
* ``--graph``: one token step is captured once as a ``torch.cuda.CUDAGraph`` (after warm-up) and
  each token is one ``graph.replay()``: the CPU runs far ahead of the GPU inside a request.

Both modes run the same ops on the same weights and produce the same tokens (checked at the end).

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --export sqlite -o decode_eager \\
        python3 workloads/inference/decode.py
    nsys profile ... -o decode_graph python3 workloads/inference/decode.py --graph
    nsys profile ... --cuda-graph-trace=node -o decode_graph_nodes python3 workloads/inference/decode.py --graph

It prints its own timings (CUDA events around each request; one short warm-up request first, in
an NVTX range ``warmup``, outside the ``request`` ranges): tokens/s and per-token time, mean and
p50 over the requests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import common as cu


def build(args: argparse.Namespace):
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    H, L, NH, V, T, B = args.hidden, args.layers, args.heads, args.vocab, args.max_len, args.batch
    HD = H // NH
    FF = 4 * H

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, device=dev, dtype=torch.float32) * shape[-1] ** -0.5).to(dt)

    emb = w(V, H)
    pos_emb = w(T, H)
    layers = [{"n1": torch.ones(H, device=dev, dtype=dt), "n2": torch.ones(H, device=dev, dtype=dt),
               "wqkv": w(3 * H, H), "wo": w(H, H), "wgate": w(FF, H), "wup": w(FF, H), "wdown": w(H, FF)}
              for _ in range(L)]
    nf = torch.ones(H, device=dev, dtype=dt)
    kc = [torch.zeros(B, NH, T, HD, device=dev, dtype=dt) for _ in range(L)]
    vc = [torch.zeros(B, NH, T, HD, device=dev, dtype=dt) for _ in range(L)]
    state = {
        "tok": torch.zeros(B, dtype=torch.long, device=dev),     # current input token per sequence
        "pos": torch.zeros(1, dtype=torch.long, device=dev),     # current position (device scalar)
        "out": torch.zeros(B, T, dtype=torch.long, device=dev),  # generated tokens
        "ar": torch.arange(T, device=dev),
    }

    def rms(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * g

    def step() -> None:
        tok, pos = state["tok"], state["pos"]
        x = emb[tok] + pos_emb.index_select(0, pos)                            # [B, H]
        mask = (state["ar"] <= pos).view(1, 1, 1, T)                           # attend to 0..pos
        for lw, k_cache, v_cache in zip(layers, kc, vc):
            h = rms(x, lw["n1"])
            q, k, v = F.linear(h, lw["wqkv"]).view(B, 3, NH, HD).unbind(1)     # each [B, NH, HD]
            k_cache.index_copy_(2, pos, k.unsqueeze(2))
            v_cache.index_copy_(2, pos, v.unsqueeze(2))
            a = F.scaled_dot_product_attention(q.unsqueeze(2), k_cache, v_cache, attn_mask=mask)
            x = x + F.linear(a.reshape(B, H), lw["wo"])
            h = rms(x, lw["n2"])
            x = x + F.linear(F.silu(F.linear(h, lw["wgate"])) * F.linear(h, lw["wup"]), lw["wdown"])
        logits = F.linear(rms(x, nf), emb)                                     # tied embeddings
        nxt = logits.argmax(-1)
        state["out"].index_copy_(1, pos, nxt.unsqueeze(1))
        tok.copy_(nxt)
        pos.add_(1)

    return state, step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graph", action="store_true", help="replay each token step as one CUDA Graph")
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--tokens", type=int, default=32, help="tokens generated per request")
    p.add_argument("--warmup-tokens", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.tokens, args.warmup_tokens = 2, 8, 2
    assert args.tokens <= args.max_len

    import torch

    state, step = build(args)
    stream = torch.cuda.Stream()
    mode = "graph" if args.graph else "eager"
    prompts = torch.randint(0, args.vocab, (args.requests + 1, args.batch), generator=torch.Generator().manual_seed(1))

    with torch.cuda.stream(stream), torch.no_grad():
        run_token = step
        if args.graph:
            with cu.nvtx_range("capture graph"):
                for _ in range(3):  # warm-up on the capture stream before capture
                    step()
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=stream):
                    step()
                run_token = graph.replay

        def request(i: int, tokens: int) -> None:
            state["tok"].copy_(prompts[i], non_blocking=False)  # tiny H2D from pageable memory
            state["pos"].zero_()
            for _ in range(tokens):
                with cu.nvtx_range("decode_token"):
                    run_token()

        with cu.nvtx_range("warmup"):
            request(0, args.warmup_tokens)
            stream.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(args.requests)]
        outs = []
        for i in range(args.requests):
            with cu.nvtx_range("request"):
                ev[i][0].record(stream)
                request(i + 1, args.tokens)
                ev[i][1].record(stream)
                ev[i][1].synchronize()  # the only CPU wait of the request
            outs.append(state["out"][:, :args.tokens].clone())
        torch.cuda.synchronize()

    ms = [a.elapsed_time(b) for a, b in ev]
    tps = [args.tokens * args.batch / (m / 1e3) for m in ms]
    per_tok_us = [m * 1e3 / args.tokens for m in ms]
    check = int(sum(int(o.sum()) for o in outs) % 1_000_003)
    print(f"[decode] {mode}: {args.requests} requests x {args.tokens} tokens x batch {args.batch}, "
          f"{args.layers} layers, hidden {args.hidden}, bf16", file=sys.stderr)
    print(f"[decode] {mode}: request ms (CUDA events) = {' '.join(f'{m:.3f}' for m in ms)}", file=sys.stderr)
    print(f"[decode] {mode}: per token mean {statistics.mean(per_tok_us):.1f} us, p50 "
          f"{statistics.median(per_tok_us):.1f} us; tokens/s (batch {args.batch}) mean {statistics.mean(tps):.0f}, "
          f"p50 {statistics.median(tps):.0f}; token checksum {check}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
