"""Hugging Face ``transformers`` text generation: ``model.generate`` on a small random-weight Llama.

The model is built from a ``LlamaConfig`` (a few layers, random weights: nothing is downloaded,
``HF_HUB_OFFLINE=1``). Each of ``--requests`` calls of ``generate`` (greedy, ``max_new_tokens`` =
``min_new_tokens`` = ``--new-tokens`` so every request makes the same number of tokens) runs inside
a user NVTX range ``request``. ``generate`` synchronizes every token (its stopping criteria read a
device flag), so the CPU never runs far ahead. Library NVTX ranges (CCCL/cub, if any) stay in.

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --export sqlite -o hf_generate \\
        python3 workloads/inference/hf_generate.py

It prints its own timings: CUDA events around each ``generate`` call (one warm-up call of the same
length first, in an NVTX range ``warmup``), new tokens/s and per-token time, mean and p50 over the requests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

import common as cu

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.new_tokens = 2, 4

    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=args.layers,
                         num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=1024,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
    with cu.nvtx_range("build model"):
        model = LlamaForCausalLM(config).to(device="cuda", dtype=torch.bfloat16).eval()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, config.vocab_size, (args.batch, args.prompt_len), generator=g).cuda()
               for _ in range(args.requests + 1)]
    gen_kw = {"do_sample": False, "pad_token_id": 0, "eos_token_id": 2}

    def generate(ids: torch.Tensor, n: int) -> torch.Tensor:
        return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                              min_new_tokens=n, **gen_kw)

    with torch.no_grad():
        with cu.nvtx_range("warmup"):
            generate(prompts[0], args.new_tokens)  # full length: a shorter one leaves lazy work to request 1
            torch.cuda.synchronize()
        ms, made = [], []
        for i in range(args.requests):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with cu.nvtx_range("request"):
                a.record()
                out = generate(prompts[i + 1], args.new_tokens)
                b.record()
                b.synchronize()
            ms.append(a.elapsed_time(b))
            made.append(int(out.shape[1]) - args.prompt_len)
    per_tok_ms = [m / n for m, n in zip(ms, made)]
    tps = [args.batch * n / (m / 1e3) for m, n in zip(ms, made)]
    print(f"[hf_generate] transformers {transformers.__version__}, torch {torch.__version__}: LlamaForCausalLM "
          f"{args.layers} layers, hidden 512, bf16, batch {args.batch}, prompt {args.prompt_len}, greedy; "
          f"{args.requests} requests x {made} new tokens", file=sys.stderr)
    print(f"[hf_generate] request ms (CUDA events) = {' '.join(f'{m:.3f}' for m in ms)}", file=sys.stderr)
    print(f"[hf_generate] per token mean {statistics.mean(per_tok_ms) * 1e3:.1f} us, p50 "
          f"{statistics.median(per_tok_ms) * 1e3:.1f} us; tokens/s (batch {args.batch}) mean "
          f"{statistics.mean(tps):.0f}, p50 {statistics.median(tps):.0f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
