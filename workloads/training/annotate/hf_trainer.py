"""A Hugging Face ``Trainer`` loop with no NVTX of its own, to record with ``nsysan profile --annotate``
(issue 53): a 4-layer LlamaForCausalLM built from a config (random weights, nothing downloaded) on
random token ids, ``--steps`` optimizer steps (AdamW, torch's fused), then ``evaluate()`` on 4 batches.

    nsysan profile --annotate -o annotate_hf -- python3 workloads/training/annotate/hf_trainer.py

Prints ``[train] annotate_hf: ... per step ...`` (wall clock between consecutive ``on_step_end``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments


class Ids(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Clock(TrainerCallback):
    def __init__(self) -> None:
        self.times: list[float] = []
        self.t0: float | None = None

    def on_step_end(self, *_a, **_k):
        t1 = time.perf_counter()
        if self.t0 is not None:
            self.times.append(t1 - self.t0)
        self.t0 = t1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=8192, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=args.seq)
    model = LlamaForCausalLM(cfg)
    clock = Clock()
    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(output_dir=out, max_steps=args.steps, per_device_train_batch_size=args.batch,
                                  per_device_eval_batch_size=args.batch, learning_rate=1e-4, optim="adamw_torch_fused",
                                  bf16=True, logging_strategy="no", save_strategy="no", report_to="none",
                                  disable_tqdm=True, dataloader_num_workers=0)
        trainer = Trainer(model=model, args=targs, train_dataset=Ids(args.steps * args.batch, args.seq, 8192),
                          eval_dataset=Ids(4 * args.batch, args.seq, 8192), callbacks=[clock])
        trainer.train()
        metrics = trainer.evaluate()
    steady = clock.times[5:]
    print(f"[train] annotate_hf: transformers {transformers.__version__}, {len(clock.times) + 1} steps, batch "
          f"{args.batch} x {args.seq} tokens, Llama 4 layers d 512, bf16, adamw_torch_fused; per step "
          f"n={len(steady)} (after 5) p50 {statistics.median(steady) * 1e3:.3f} ms, mean "
          f"{statistics.mean(steady) * 1e3:.3f} ms; eval loss {metrics.get('eval_loss', float('nan')):.4f}", flush=True)


if __name__ == "__main__":
    main()
