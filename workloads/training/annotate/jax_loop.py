"""A JAX training loop with no NVTX of its own, to record with ``nsysan profile --annotate``
(issue 53): an MLP with optax AdamW, one ``jax.jit``'d ``train_step`` (forward, backward, update)
per batch, the loss read every step (``float(loss)``: one sync a step, as a loop that logs it).

    nsysan profile --annotate -o annotate_jax -- python3 workloads/training/annotate/jax_loop.py

Prints ``[train] annotate_jax: ... per step ...`` (wall clock between consecutive loss reads).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=512)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    sizes = [512, *[args.width] * 5, 10]
    params = [(jnp.asarray(rng.standard_normal((a, b), np.float32) / np.sqrt(a)), jnp.zeros(b))
              for a, b in itertools.pairwise(sizes)]
    opt = optax.adamw(1e-3)
    state = opt.init(params)

    def loss_fn(p, x, y):
        h = x
        for i, (w, b) in enumerate(p):
            h = h @ w + b
            if i < len(p) - 1:
                h = jax.nn.relu(h)
        return optax.softmax_cross_entropy_with_integer_labels(h, y).mean()

    @jax.jit
    def train_step(p, s, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        updates, s = opt.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    xs = rng.standard_normal((args.steps, args.batch, 512), np.float32)
    ys = rng.integers(0, 10, (args.steps, args.batch))
    times, t0 = [], None
    for i in range(args.steps):
        params, state, loss = train_step(params, state, xs[i], ys[i])
        last = float(loss)
        t1 = time.perf_counter()
        if t0 is not None:
            times.append(t1 - t0)
        t0 = t1
    steady = times[5:]
    print(f"[train] annotate_jax: jax {jax.__version__} on {jax.devices()[0].device_kind}, {args.steps} steps, batch "
          f"{args.batch}, MLP width {args.width}, optax adamw; per step n={len(steady)} (after 5) p50 "
          f"{statistics.median(steady) * 1e3:.3f} ms, mean {statistics.mean(steady) * 1e3:.3f} ms; loss last {last:.4f}",
          flush=True)


if __name__ == "__main__":
    main()
