"""A small decoder-only transformer trained with JAX: one ``jax.jit``'d train step per iteration.

Pure JAX (no Flax): token embedding (tied with the output head), learned positions, ``--layers``
pre-norm blocks (causal self-attention through ``jax.nn.dot_product_attention``, GELU MLP) whose
parameters are stacked on a leading layer axis and applied with ``jax.lax.scan`` (one compiled
layer body, as JAX LLM code usually does), bf16 matrix products with f32 parameters, next-token
cross-entropy. The update is ``optax.adamw`` when
optax is installed, else plain SGD with momentum written by hand; either way it is inside the same
jitted function as forward and backward, with the parameters and optimizer state donated.

Each timed step (NVTX range ``train_step``) passes a host (numpy) token batch to the jitted step,
so JAX copies it to the GPU, and then waits for the new parameters and the loss
(``jax.block_until_ready``): one synchronization per step, as a loop that logs its loss does.
The ``--warmup`` steps before them (the first one compiles) run in one NVTX range ``warmup``.

Run under Nsight Systems, XLA adds NVTX ranges of its own (``XlaModule:...``, ``Thunk:...``) and may
run parts of the step as CUDA graphs (XLA "command buffers"); this script sets no ``XLA_FLAGS``
of its own unless asked: ``--no-command-buffer`` appends ``--xla_gpu_enable_command_buffer=`` (plain
kernel launches), ``--no-autotune`` appends ``--xla_gpu_autotune_level=0`` (no GEMM/fusion autotuning
while compiling: its thousands of candidate compilations and timing kernels, each with XLA's NVTX
ranges, would make most of the trace).

    nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --cuda-graph-trace=node --osrt-threshold=10000 \\
        --export sqlite -o jax_train python3 workloads/training/jax_train.py --no-autotune    # as record.py does

It prints its own timings: the wall time of each timed step (dispatch + block_until_ready), mean,
p50, min and max, steps/s and tokens/s, the first warm-up step (compile included), the mean time
the jitted call takes to return (dispatch alone), and the first and last loss.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

try:
    import nvtx as _nvtx

    def push(name: str) -> None:
        _nvtx.push_range(name)

    def pop() -> None:
        _nvtx.pop_range()

    NVTX = "nvtx package"
except ImportError:  # no NVTX bindings: ranges are skipped (the trace will lack train_step)
    def push(name: str) -> None:
        pass

    def pop() -> None:
        pass

    NVTX = "none (nvtx package missing: no NVTX ranges of our own)"


def init_params(key, vocab: int, seq: int, d: int, layers: int):
    import jax
    import jax.numpy as jnp

    def dense(k, fan_in: int, fan_out: int):
        return jax.random.normal(k, (fan_in, fan_out), jnp.float32) * fan_in ** -0.5

    keys = iter(jax.random.split(key, 2 + 4 * layers))
    blocks = []
    for _ in range(layers):
        blocks.append({
            "ln1_g": jnp.ones((d,)), "ln1_b": jnp.zeros((d,)),
            "qkv": dense(next(keys), d, 3 * d), "proj": dense(next(keys), d, d),
            "ln2_g": jnp.ones((d,)), "ln2_b": jnp.zeros((d,)),
            "fc1": dense(next(keys), d, 4 * d), "fc2": dense(next(keys), 4 * d, d),
        })
    blocks = jax.tree.map(lambda *xs: jnp.stack(xs), *blocks)  # one (layers, ...) array per parameter
    return {
        "emb": jax.random.normal(next(keys), (vocab, d)) * 0.02,
        "pos": jax.random.normal(next(keys), (seq, d)) * 0.02,
        "blocks": blocks,
        "lnf_g": jnp.ones((d,)), "lnf_b": jnp.zeros((d,)),
    }


def make_loss(heads: int):
    import jax
    import jax.numpy as jnp

    bf16 = jnp.bfloat16

    def layer_norm(x, g, b):
        x = x.astype(jnp.float32)
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return ((x - mu) * jax.lax.rsqrt(var + 1e-5) * g + b).astype(bf16)

    def block(x, p):
        b, t, d = x.shape
        h = layer_norm(x, p["ln1_g"], p["ln1_b"])
        q, k, v = jnp.split(h @ p["qkv"].astype(bf16), 3, axis=-1)
        q, k, v = (z.reshape(b, t, heads, d // heads) for z in (q, k, v))
        a = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(b, t, d)
        x = x + (a @ p["proj"].astype(bf16)).astype(jnp.float32)
        h = layer_norm(x, p["ln2_g"], p["ln2_b"])
        h = jax.nn.gelu(h @ p["fc1"].astype(bf16))
        return x + (h @ p["fc2"].astype(bf16)).astype(jnp.float32)

    def loss_fn(params, tokens):
        inp, tgt = tokens[:, :-1], tokens[:, 1:]
        x = params["emb"][inp] + params["pos"][None, : inp.shape[1]]
        x, _ = jax.lax.scan(lambda h, p: (block(h, p), None), x, params["blocks"])
        h = layer_norm(x, params["lnf_g"], params["lnf_b"])
        logits = (h @ params["emb"].astype(bf16).T).astype(jnp.float32)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.take_along_axis(logp, tgt[..., None], axis=-1).mean()

    return loss_fn


def make_optimizer(lr: float):
    """(name, init(params) -> state, update(grads, state, params) -> (params, state))."""
    import jax

    try:
        import optax
    except ImportError:
        optax = None
    if optax is not None:
        tx = optax.adamw(lr, weight_decay=0.01)

        def update(grads, state, params):
            updates, state = tx.update(grads, state, params)
            return optax.apply_updates(params, updates), state

        return f"optax {optax.__version__} adamw", tx.init, update

    def sgd_init(params):
        return jax.tree.map(lambda p: p * 0, params)

    def sgd_update(grads, mom, params):
        mom = jax.tree.map(lambda m, g: 0.9 * m + g, mom, grads)
        return jax.tree.map(lambda p, m: p - 30 * lr * m, params, mom), mom

    return "manual SGD (momentum 0.9)", sgd_init, sgd_update


def token_batches(n: int, batch: int, seq: int, vocab: int) -> list[np.ndarray]:
    """Host batches of learnable sequences: each row is an arithmetic progression modulo the vocabulary."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        start = rng.integers(0, vocab, (batch, 1))
        stride = rng.integers(1, 8, (batch, 1))
        out.append(((start + stride * np.arange(seq + 1)) % vocab).astype(np.int32))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--no-command-buffer", action="store_true",
                   help="append --xla_gpu_enable_command_buffer= to XLA_FLAGS (no CUDA graphs)")
    p.add_argument("--no-autotune", action="store_true",
                   help="append --xla_gpu_autotune_level=0 to XLA_FLAGS (no autotuning while compiling)")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.layers, args.dim, args.seq = 4, 2, 2, 256, 64
    for flag, wanted in (("--xla_gpu_enable_command_buffer=", args.no_command_buffer),
                         ("--xla_gpu_autotune_level=0", args.no_autotune)):
        if wanted:
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
    xla_flags = os.environ.get("XLA_FLAGS", "")

    import jax

    dev = jax.devices()[0]
    loss_fn = make_loss(args.heads)
    opt_name, opt_init, opt_update = make_optimizer(args.lr)

    def step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        params, opt_state = opt_update(grads, opt_state, params)
        return params, opt_state, loss

    train_step = jax.jit(step, donate_argnums=(0, 1))
    params = init_params(jax.random.PRNGKey(0), args.vocab, args.seq, args.dim, args.layers)
    opt_state = opt_init(params)
    n_params = sum(x.size for x in jax.tree.leaves(params))
    batches = token_batches(8, args.batch, args.seq, args.vocab)

    first_s = None
    with_nvtx = NVTX
    push("warmup")
    try:
        for i in range(args.warmup):
            t0 = time.perf_counter()
            params, opt_state, loss = train_step(params, opt_state, batches[i % len(batches)])
            jax.block_until_ready((params, opt_state, loss))
            if first_s is None:
                first_s = time.perf_counter() - t0
    finally:
        pop()

    step_s, dispatch_s, losses = [], [], []
    for i in range(args.steps):
        tokens = batches[(args.warmup + i) % len(batches)]
        t0 = time.perf_counter()
        push("train_step")
        try:
            params, opt_state, loss = train_step(params, opt_state, tokens)
            t1 = time.perf_counter()
            jax.block_until_ready((params, opt_state, loss))
        finally:
            pop()
        t2 = time.perf_counter()
        step_s.append(t2 - t0)
        dispatch_s.append(t1 - t0)
        losses.append(float(loss))

    ms = [s * 1e3 for s in step_s]
    tokens_per_step = args.batch * args.seq
    print(f"[train] jax_train: jax {jax.__version__} on {dev.platform} {dev.device_kind}; {args.steps} steps (after "
          f"{args.warmup} warm-up), batch {args.batch} x {args.seq} tokens, transformer {args.layers} layers (lax.scan) d "
          f"{args.dim} heads {args.heads} vocab {args.vocab} ({n_params / 1e6:.1f} M params), bf16 matmuls, "
          f"{opt_name}; NVTX: {with_nvtx}; XLA_FLAGS={xla_flags!r}", file=sys.stderr)
    print(f"[train] jax_train: first warm-up step (compile + run) {first_s * 1e3:.1f} ms", file=sys.stderr)
    print(f"[train] jax_train: per step (dispatch + block_until_ready, wall clock) n={len(ms)} mean "
          f"{statistics.mean(ms):.3f} ms, p50 {statistics.median(ms):.3f} ms, min {min(ms):.3f} ms, max "
          f"{max(ms):.3f} ms; steps/s {args.steps / sum(step_s):.1f}; tokens/s "
          f"{tokens_per_step * args.steps / sum(step_s):.0f}; dispatch (call returns) mean "
          f"{statistics.mean(dispatch_s) * 1e3:.3f} ms; loss first {losses[0]:.4f} last {losses[-1]:.4f}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
